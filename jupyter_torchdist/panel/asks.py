"""Requests to a kernel: a file in its ``kernel-<id>.asks/`` folder that the kernel's own publisher thread takes.

Why files, not a message: the thread reads them whatever the kernel is doing (a foreground run keeps its main thread
busy, a kernel with no front end connected reads no channel), nothing runs in the user's namespace, and the command
line in a terminal (``jupyter-torchdist stop``) asks the same way without a Jupyter server. The folder is the
kernel's, owner-only like the rest of the registry. The kernel removes a request as it takes it, so the asker knows
it was taken when the file is gone.

Kinds: ``stop`` (a run or a sweep) and ``report`` (write the run's report now: the panel opened it while it runs).
``target`` is the run's (or sweep's) durable id (``run.id``): a kernel takes a request for an id it owns, and drops
any other, so a request can never reach a run it was not meant for (a restarted kernel numbers its runs from 1 again).
"""
from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any, Final

from ..core.held_folder import Held
from .registry import RUN_ID, asks_dir

__all__ = ["KINDS", "ask", "Inbox"]

KINDS: Final = ("stop", "report")
RESCAN_S: Final = 1.0   # a folder changed this recently is read again (its clock may be coarser than our ticks)


def _name(kind: str, target: str) -> str:
    if kind not in KINDS or not RUN_ID.match(target):
        raise ValueError(f"not a request: {kind} {target!r}")
    return f"{kind}-{target}.json"


def ask(folder: Path, kernel_id: str, kind: str, target: str, by: str) -> Path:
    """Leave a request for the kernel; the file's path (gone once the kernel took it). ``FileNotFoundError`` when the
    kernel has no asks folder (it is not a kernel with the extension loaded, or it has gone)."""
    where = asks_dir(folder, kernel_id)
    name = _name(kind, target)
    try:
        with Held(folder) as registry, registry.sub(where.name) as asks:
            asks.write(name, {"kind": kind, "target": target, "by": by[:200], "at": time.time()})
    except FileNotFoundError:
        raise FileNotFoundError(f"kernel {kernel_id} takes no requests (no {where})") from None
    return where / name


def wait_taken(path: Path, timeout: float) -> bool:
    """Wait (at most ``timeout`` seconds) for the kernel to take the request at ``path``; True when it did."""
    deadline = time.monotonic() + timeout
    while os.path.exists(path):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


class Inbox:
    """The kernel's side: its asks folder, held open (a folder swapped for another after it was made is never the
    one read), read when it changed (one ``fstat`` per look otherwise)."""

    def __init__(self, folder: Path, kernel_id: str) -> None:
        with Held(folder) as registry:
            self.held = registry.sub(asks_dir(folder, kernel_id).name, create=True)
        self.path = self.held.path
        for name in self.held.names():   # left for this kernel id's previous process (a restarted kernel keeps
            self.held.remove(name)       # its id, and its run numbers start again: "stop 1" was not for ours)
        self._seen: int | None = None

    def take(self) -> list[dict[str, Any]]:
        """The requests left since the last look, oldest first, each removed as taken."""
        try:
            mtime = self.held.changed_ns()
        except (OSError, ValueError):
            return []
        if mtime == self._seen and time.time() - mtime / 1e9 > RESCAN_S:
            return []
        self._seen = mtime
        taken: list[tuple[float, dict[str, Any]]] = []
        for name in self.held.names():
            if name.startswith(".") or not name.endswith(".json"):
                continue
            value = self.held.read(name)
            self.held.remove(name)
            if isinstance(value, dict) and value.get("kind") in KINDS and isinstance(value.get("target"), str):
                at = value.get("at")
                taken.append((at if isinstance(at, float) and math.isfinite(at) else 0.0, value))
        return [v for _, v in sorted(taken, key=lambda t: t[0])]

    def close(self) -> None:
        """The kernel ends: requests left now would never be taken."""
        if self.held.fd is None:
            return
        for name in self.held.names():
            self.held.remove(name)
        self.held.close()
        try:
            os.rmdir(self.path)
        except OSError:
            pass
