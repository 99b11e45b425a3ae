"""The list of the user's runs, as the API serves it and ``jupyter-torchdist runs`` prints it: every kernel's
entries, with what the reader knows better than the kernel (a kernel gone without a word: its runs are ``lost``).

By default the runs of living kernels (ended ones too, as their kernel keeps them); ``everything``: also those of
kernels that have ended or died in the last ``registry.KEEP_S``.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .registry import ENDED, KernelRecord, RunEntry, kernel_state, read_records

__all__ = ["Found", "list_runs", "find", "as_json", "etag_of", "going"]


def _as_seen(entry: RunEntry, record: KernelRecord, state: str) -> RunEntry:
    seen: Any = dict(entry)
    seen["kernel"] = state            # live, ended (it said so), gone (it died without a word)
    if state != "live" and seen.get("state") not in ENDED:
        seen["state"] = "lost"
        seen["ended"] = seen.get("ended") or record.get("ended") or record["updated"]
        seen["outcome"] = ("its kernel ended while it ran" if state == "ended"
                           else f"its kernel (pid {record['pid']} on {record.get('host')}) is gone")
    return seen


def list_runs(folder: Path | None, everything: bool = False, notebooks: Mapping[str, str] | None = None,
              now: float | None = None, root: str | None = None) -> list[RunEntry]:
    """The runs and sweeps, newest first. ``notebooks``: kernel id -> the notebook's path now (the server knows a
    renamed notebook's new path; the kernel only the one it started with). ``root``: the server's root folder, to
    which an absolute path a kernel gave (``JPY_SESSION_NAME``; a detached run's runner, which no session names) is
    made relative, as the server's own paths are."""
    if folder is None:
        return []
    now = time.time() if now is None else now
    out: list[RunEntry] = []
    for record in read_records(folder):
        state = kernel_state(record, now)
        if state != "live" and not everything and not _detached_lately(record, now):
            continue
        for entry in record["entries"]:
            seen = _as_seen(entry, record, state)
            if notebooks and record["kernel_id"] in notebooks:
                seen["notebook"] = notebooks[record["kernel_id"]]
            elif root and seen.get("notebook"):
                seen["notebook"] = _under(str(seen["notebook"]), root)
            out.append(seen)
    out.sort(key=lambda e: (-float(e.get("submitted") or 0.0), e.get("id", "")))
    return out


DETACHED_SHOWN_S: Final = 3600.0   # an ended detached run stays listed this long (no notebook shows how it ended)


def _detached_lately(record: KernelRecord, now: float) -> bool:
    """A detached run's runner that ended less than ``DETACHED_SHOWN_S`` ago: its run is listed as it ended (and
    attached to from the panel), as a kernel's ended runs are while the kernel lives."""
    ended = record.get("ended")
    return record["kernel_id"].startswith("detached-") and ended is not None and now - float(ended) < DETACHED_SHOWN_S


def _under(path: str, root: str) -> str:
    """``path`` relative to ``root`` when it is an absolute path inside it; as it is otherwise."""
    if not os.path.isabs(path):
        return path
    try:
        inside = os.path.relpath(path, root)
    except ValueError:
        return path
    return path if inside.startswith(os.pardir) else inside.replace(os.sep, "/")


@dataclass(frozen=True)
class Found:
    """A run (or sweep) found by its id, and its kernel's file."""
    entry: RunEntry
    record: KernelRecord
    kernel: str   # live, ended, gone


def find(folder: Path | None, run_id: str) -> Found | None:
    """The run or sweep called ``run_id`` (its whole id, as listed), in any kernel's file."""
    if folder is None:
        return None
    now = time.time()
    for record in read_records(folder):
        for entry in record["entries"]:
            if entry.get("id") == run_id:
                state = kernel_state(record, now)
                return Found(_as_seen(entry, record, state), record, state)
    return None


def going(entry: Mapping[str, Any]) -> bool:
    return entry.get("state") not in ENDED


def as_json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str).encode()


def etag_of(body: bytes) -> str:
    return '"' + hashlib.sha1(body).hexdigest()[:20] + '"'
