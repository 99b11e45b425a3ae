"""Requests to a kernel: a file in its ``kernel-<id>.asks/`` folder that the kernel's own publisher thread takes.

Why files, not a message: the thread reads them whatever the kernel is doing (a foreground run keeps its main thread
busy, a kernel with no front end connected reads no channel), nothing runs in the user's namespace, and the command
line in a terminal (``jupyter-torchdist stop``) asks the same way without a Jupyter server. The folder is the
kernel's, owner-only like the rest of the registry. The kernel removes a request as it takes it, so the asker knows
it was taken when the file is gone.

Kinds: ``stop`` (a run or a sweep: ``target`` is its number, or ``s<n>`` for a sweep) and ``report`` (write the run's
report now: the panel opened it while it runs).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Final

from .folder import ensure_private, read_json, remove, write_json
from .registry import asks_dir

__all__ = ["KINDS", "ask", "Inbox"]

KINDS: Final = ("stop", "report")
RESCAN_S: Final = 1.0   # a folder changed this recently is read again (its clock may be coarser than our ticks)


def _name(kind: str, target: str) -> str:
    if kind not in KINDS or not target or not target.lstrip("s").isdigit():
        raise ValueError(f"not a request: {kind} {target!r}")
    return f"{kind}-{target}.json"


def ask(folder: Path, kernel_id: str, kind: str, target: str, by: str) -> Path:
    """Leave a request for the kernel; the file's path (gone once the kernel took it). ``FileNotFoundError`` when the
    kernel has no asks folder (it is not a kernel with the extension loaded, or it has gone)."""
    where = asks_dir(folder, kernel_id)
    if not where.is_dir():
        raise FileNotFoundError(f"kernel {kernel_id} takes no requests (no {where})")
    ensure_private(where)
    path = where / _name(kind, target)
    write_json(path, {"kind": kind, "target": target, "by": by[:200], "at": time.time()})
    return path


def wait_taken(path: Path, timeout: float) -> bool:
    """Wait (at most ``timeout`` seconds) for the kernel to take the request at ``path``; True when it did."""
    deadline = time.monotonic() + timeout
    while os.path.exists(path):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


class Inbox:
    """The kernel's side: its asks folder, read when it changed (one ``stat`` per look otherwise)."""

    def __init__(self, folder: Path, kernel_id: str) -> None:
        self.path = asks_dir(folder, kernel_id)
        self.path.mkdir(mode=0o700, exist_ok=True)
        ensure_private(self.path)
        for entry in os.scandir(self.path):   # left for this kernel id's previous process (a restarted kernel keeps
            remove(Path(entry.path))          # its id, and its run numbers start again: "stop 1" was not for ours)
        self._seen: int | None = None

    def take(self) -> list[dict[str, Any]]:
        """The requests left since the last look, oldest first, each removed as taken."""
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except FileNotFoundError:
            return []
        if mtime == self._seen and time.time() - mtime / 1e9 > RESCAN_S:
            return []
        self._seen = mtime
        taken: list[tuple[float, dict[str, Any]]] = []
        for entry in os.scandir(self.path):
            if entry.name.startswith(".") or not entry.name.endswith(".json"):
                continue
            value = read_json(Path(entry.path))
            remove(Path(entry.path))
            if isinstance(value, dict) and value.get("kind") in KINDS and isinstance(value.get("target"), str):
                taken.append((float(value.get("at") or 0.0), value))
        return [v for _, v in sorted(taken, key=lambda t: t[0])]

    def close(self) -> None:
        """The kernel ends: requests left now would never be taken."""
        for entry in os.scandir(self.path) if self.path.is_dir() else ():
            remove(Path(entry.path))
        try:
            os.rmdir(self.path)
        except OSError:
            pass
