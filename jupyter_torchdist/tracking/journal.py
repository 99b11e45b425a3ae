"""A journal: what a run (or a sweep, with its members) leaves on record, first on local disk, then shipped.

Every record is a JSON line appended to ``<spool>/<id>.jsonl`` before anything is sent anywhere, so a tracking
server that is down, or a kernel that dies, loses nothing: the shipper (``shipper.py``) sends a journal from where
each sink stopped (``<id>.state.json``: a byte position per sink, and each sink's notes, such as the runs it made)
and removes it once every sink has it all. Files a record names (the report, the cell's source) wait beside it in
``<id>/``. Journals are read as a stream, a line at a time.

The journals of a machine's user are bounded (``JUPYTER_TORCHDIST_JOURNAL_MB``, ``Bound``): near the bound it is
said once; past it a run's metric points are no longer kept (its other records are: small), and its end says how
many were not.

The kernel that writes a journal holds an exclusive ``flock`` on it while it is open; a journal nobody holds was
left by a kernel that ended first, and the next kernel's shipper sends it.

Records (``k``): ``head`` (the sinks, where each one's records go: ``to``), ``run`` (a run begins: its key, its
parent's, experiment, name, params, tags, folder, what each tracker adds: ``for``), ``m`` (metric points
``[name, value, step, ms]``), ``end`` (status, tags, last points, files; a sweep's: its best member's key,
``best``), ``close``.
"""
from __future__ import annotations

import fcntl
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import IO, Any, Final

from ..core.errors import OptionsError
from ..core.track_options import DEFAULT_JOURNAL_MB, JOURNAL_ENV, journal_bound

__all__ = ["Journal", "spool_dir", "read_records", "read_head", "load_state", "save_state", "journal_ids", "Bound",
           "bound_for", "destinations"]

WARN_AT: Final = 0.8   # the share of the bound at which it is said that the bound is near


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

    def __init__(self, sinks: tuple[str, ...], uri: str | None = None, spool: str | None = None,
                 to: dict[str, Any] | None = None) -> None:
        self.spool = spool or spool_dir()
        self.bound = bound_for(self.spool)
        self.dropped: dict[str, int] = {}   # a run's key -> metric points not kept (past the bound)
        os.makedirs(self.spool, exist_ok=True)
        now = time.time_ns()   # ids sort as journals were opened (to the microsecond), then apart by a random tail
        self.id = f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(now / 1e9))}.{now // 1000 % 10**6:06d}-" \
                  f"{uuid.uuid4().hex[:8]}"
        self.path = os.path.join(self.spool, f"{self.id}.jsonl")
        self.files = os.path.join(self.spool, self.id)
        self.sinks = sinks
        self.closed = False
        self._lock = threading.Lock()
        # Locked before it can be seen: written under a name no shipper lists, then renamed (the lock is the file's)
        hidden = os.path.join(self.spool, f".{self.id}.jsonl.new")
        self._f: IO[str] = open(hidden, "a", encoding="utf-8")
        fcntl.flock(self._f, fcntl.LOCK_EX | fcntl.LOCK_NB)   # ours while open
        self.append({"k": "head", "sinks": list(sinks), "uri": uri, "to": to or {}})
        os.rename(hidden, self.path)

    def append(self, record: dict[str, Any]) -> None:
        """Write ``record`` (NaN and infinities as JSON's NaN/Infinity: Python reads them back). Past the bound a
        metric record is counted, not written."""
        line = json.dumps(record, separators=(",", ":"), default=str) + "\n"
        size = len(line.encode())
        if record.get("k") == "m" and not self.bound.take(size):
            key = str(record.get("key"))
            with self._lock:
                self.dropped[key] = self.dropped.get(key, 0) + len(record.get("pts") or [])
            return
        if record.get("k") != "m":
            self.bound.add(size)
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
        line = json.dumps({"k": "close"}) + "\n"
        with self._lock:
            if not self.closed:
                self._f.write(line)
                self._f.flush()
            self.closed = True

    def release(self) -> None:
        with self._lock:
            self.closed = True
            if not self._f.closed:
                self._f.close()   # the lock goes with it


def read_records(path: str, position: int) -> Iterator[tuple[dict[str, Any], int]]:
    """The complete records from byte ``position`` on, each with the position after it: read a line at a time, so a
    long journal never sits whole in memory."""
    with open(path, "rb") as f:
        f.seek(position)
        offset = position
        for line in f:
            if not line.endswith(b"\n"):
                return   # being written: read it next time
            offset += len(line)
            try:
                record = json.loads(line)
            except ValueError:
                continue   # a line torn by a crash: skipped, never stops the rest
            if isinstance(record, dict):
                yield record, offset


def read_head(path: str) -> dict[str, Any] | None:
    """A journal's head (its first record), or None while it is not written yet."""
    try:
        return next((r for r, _ in read_records(path, 0)), None)
    except OSError:
        return None


def destinations(head: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each sink of a journal with where its records go. A journal an earlier version wrote has only MLflow's URI
    (``uri``): the others' settings are empty."""
    to = head.get("to")
    to = to if isinstance(to, dict) else {}
    out: dict[str, dict[str, Any]] = {}
    for name in head.get("sinks") or []:
        found = to.get(name)
        settings: dict[str, Any] = found if isinstance(found, dict) else {}
        if name == "mlflow" and "uri" not in settings:
            settings = {**settings, "uri": head.get("uri")}
        out[str(name)] = settings
    return out


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


class Bound:
    """How much the journals of a spool folder may hold (``JUPYTER_TORCHDIST_JOURNAL_MB``): what is there is counted
    when the first journal opens and after the shipper removes one; what is written is added."""

    def __init__(self, spool: str, limit: int) -> None:
        self.spool, self.limit = spool, limit
        self.used = 0
        self.warned = self.full_said = False
        self._lock = threading.Lock()
        self.recount()

    def recount(self) -> None:
        used = 0
        for root, _, files in os.walk(self.spool):
            for name in files:
                try:
                    used += os.path.getsize(os.path.join(root, name))
                except OSError:
                    pass
        with self._lock:
            self.used = used
            if used < WARN_AT * self.limit:
                self.warned = self.full_said = False   # said again should it fill up again

    def add(self, size: int) -> None:
        with self._lock:
            self.used += size
        self._near()

    def take(self, size: int) -> bool:
        """Room for ``size`` more bytes of metric points (taken), or False past the bound (said once)."""
        with self._lock:
            if self.used + size > self.limit:
                full, self.full_said = not self.full_said, True
            else:
                self.used += size
                full = None
        if full is None:
            self._near()
            return True
        if full:
            print(f"jupyter-torchdist warning: tracking: the records not yet sent fill their bound "
                  f"({_mb(self.limit)}, {JOURNAL_ENV}) in {self.spool}: runs go on, but their metric points are no "
                  "longer kept until records are sent (each run's record says how many it lost: jtd.points_not_kept). "
                  "`jupyter-torchdist tracking` lists what waits and where; resend or drop it there.", file=sys.stderr)
        return False

    def _near(self) -> None:
        with self._lock:
            said, self.warned = self.warned, self.warned or self.used >= WARN_AT * self.limit
        if not said and self.warned:
            print(f"jupyter-torchdist warning: tracking: the records not yet sent take {_mb(self.used)} of their bound "
                  f"({_mb(self.limit)}, {JOURNAL_ENV}) in {self.spool}; past it, runs' metric points are not kept. "
                  "`jupyter-torchdist tracking` lists what waits and where; resend or drop it there.", file=sys.stderr)


_bounds: dict[str, Bound] = {}
_bounds_lock = threading.Lock()


def _mb(size: float) -> str:
    return f"{size / 1024 / 1024:.0f} MB"


def bound_for(spool: str) -> Bound:
    """The spool folder's bound (one per folder and process); an unreadable setting is said before the run
    (``check_environment``), here its default stands."""
    try:
        limit = journal_bound()
    except OptionsError:
        limit = DEFAULT_JOURNAL_MB * 1024 * 1024
    with _bounds_lock:
        bound = _bounds.get(spool)
        if bound is None or bound.limit != limit:
            bound = _bounds[spool] = Bound(spool, limit)
        return bound
