"""A journal: what a run (or a sweep, with its members) leaves on record, first on local disk, then shipped.

Every record is a JSON line appended to ``<spool>/<id>.jsonl`` before anything is sent anywhere, so a tracking
server that is down, or a kernel that dies, loses nothing: the shipper (``shipper.py``) sends a journal from where
each sink stopped (``<id>.state.json``: a byte position per sink, and the MLflow run ids made so far) and removes
it once every sink has it all. Files a record names (the report, the cell's source) wait beside it in ``<id>/``.

The kernel that writes a journal holds an exclusive ``flock`` on it while it is open; a journal nobody holds was
left by a kernel that ended first, and the next kernel's shipper sends it.

Records (``k``): ``head`` (the sinks, MLflow's tracking URI), ``run`` (a run begins: its key, its parent's,
experiment, name, params, tags, folder), ``m`` (metric points ``[name, value, step, ms]``), ``end`` (status, tags,
last points, files), ``close``.
"""
from __future__ import annotations

import fcntl
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from typing import IO, Any

__all__ = ["Journal", "spool_dir", "read_records", "load_state", "save_state", "journal_ids"]


def spool_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jupyter-torchdist", "tracking")


def journal_ids(spool: str) -> list[str]:
    """The journals in ``spool``, oldest first (a sweep's parent before anything after it)."""
    try:
        names = [n[:-6] for n in os.listdir(spool) if n.endswith(".jsonl")]
    except FileNotFoundError:
        return []
    return sorted(names)


class Journal:
    """One journal, open for appending (thread-safe: a sweep's members end on threads of their own)."""

    def __init__(self, sinks: tuple[str, ...], uri: str | None = None, spool: str | None = None) -> None:
        self.spool = spool or spool_dir()
        os.makedirs(self.spool, exist_ok=True)
        self.id = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
        self.path = os.path.join(self.spool, f"{self.id}.jsonl")
        self.files = os.path.join(self.spool, self.id)
        self.sinks = sinks
        self.closed = False
        self._lock = threading.Lock()
        self._f: IO[str] = open(self.path, "a", encoding="utf-8")
        fcntl.flock(self._f, fcntl.LOCK_EX | fcntl.LOCK_NB)   # ours while open; a new file: nobody else has it
        self.append({"k": "head", "sinks": list(sinks), "uri": uri})

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"), default=str) + "\n"
        with self._lock:
            if self.closed:
                return
            self._f.write(line)
            self._f.flush()

    def file_folder(self, key: str) -> str:
        """Where a record's files wait until shipped."""
        folder = os.path.join(self.files, key)
        os.makedirs(folder, exist_ok=True)
        return folder

    def close(self) -> None:
        """No more records: the shipper removes the journal once every sink has sent it (and then ``release``s it:
        until then the lock says it is this kernel's to send)."""
        self.append({"k": "close"})
        with self._lock:
            self.closed = True

    def release(self) -> None:
        with self._lock:
            self.closed = True
            if not self._f.closed:
                self._f.close()   # the lock goes with it


def read_records(path: str, position: int) -> Iterator[tuple[dict[str, Any], int]]:
    """The complete records from byte ``position`` on, each with the position after it."""
    with open(path, "rb") as f:
        f.seek(position)
        data = f.read()
    offset = position
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            return   # being written: read it next time
        offset += len(line)
        try:
            yield json.loads(line), offset
        except ValueError:
            continue   # a line torn by a crash: skipped, never stops the rest


def load_state(spool: str, jid: str) -> dict[str, Any]:
    try:
        with open(os.path.join(spool, f"{jid}.state.json"), encoding="utf-8") as f:
            state = json.load(f)
            return state if isinstance(state, dict) else {}
    except (OSError, ValueError):
        return {}


def save_state(spool: str, jid: str, state: dict[str, Any]) -> None:
    path = os.path.join(spool, f"{jid}.state.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f)
    os.replace(tmp, path)
