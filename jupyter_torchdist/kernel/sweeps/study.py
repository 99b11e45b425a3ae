"""A sweep's study on disk (``--study PATH``): every member's parameters, state and metric, in one SQLite file.

Running the same cell again, after a kernel restart too, goes on where the search stopped, as Ray Tune's
``Tuner.restore`` does: members that ended (done, pruned, failed) are not run again and keep their rows and curves;
members that were queued or training (or stopped by the user) are run again with their parameters. The file also
holds Optuna's own record when the search is Optuna's (its tables beside ours). A file made by another sweep (another
space, search, metric or seed) is refused, never mixed.
"""
from __future__ import annotations

import ast
import json
import os
import sqlite3
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from ...core.errors import LaunchError

__all__ = ["Member", "StudyStore", "open_study", "storable", "ENDED_FOR_GOOD"]

ENDED_FOR_GOOD: Final = ("done", "pruned", "failed")   # not run again on resume
_TABLES: Final = """
CREATE TABLE IF NOT EXISTS jtd_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jtd_members (number INTEGER PRIMARY KEY, record TEXT NOT NULL);
"""


@dataclass
class Member:
    """A member of the study as it is kept: enough to show its row and curve, and to run it again."""
    number: int                          # 1, 2, ... in the order drawn, across kernels
    params: dict[str, Any]
    state: str = "queued"                # queued, running, done, failed, stopped, pruned
    token: Any = None                    # Optuna's trial number
    steps: int | None = None
    best: float | None = None
    last: float | None = None
    final: float | None = None           # the figure told to the search when it ended
    pruned_at: int | None = None
    why: str | None = None
    seconds: float | None = None
    ended_at: float | None = None
    curve: list[list[float]] = field(default_factory=list)


class StudyStore:
    """The open file; every write is its own transaction (a killed kernel loses at most the member it was saving)."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
        self._db.executescript(_TABLES)

    def claim(self, signature: Mapping[str, Any]) -> None:
        """Mark the file as this sweep's, or refuse it when another sweep made it."""
        with self._lock, self._db:
            row = self._db.execute("SELECT value FROM jtd_meta WHERE key = 'sweep'").fetchone()
            if row is None:
                self._db.execute("INSERT INTO jtd_meta VALUES ('sweep', ?)", (json.dumps(dict(signature)),))
                return
        kept = json.loads(row[0])
        differ = [k for k in sorted(set(kept) | set(signature)) if kept.get(k) != signature.get(k)]
        if differ:
            said = "; ".join(f"{k}: {kept.get(k)!r} there, {signature.get(k)!r} here" for k in differ)
            raise LaunchError(f"the study {self.path} was made by another sweep ({said}). Give this sweep its own "
                              "--study file, or delete that one to start over.")

    def members(self) -> list[Member]:
        with self._lock:
            rows = self._db.execute("SELECT record FROM jtd_members ORDER BY number").fetchall()
        return [_load(text) for (text,) in rows]

    def save(self, member: Member) -> None:
        text = _dump(member)
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO jtd_members VALUES (?, ?)", (member.number, text))

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _dump(member: Member) -> str:
    record = asdict(member)
    record["params"] = repr(member.params)  # Python literals round-trip (tuples stay tuples), JSON's would not
    return json.dumps(record)


def _load(text: str) -> Member:
    record = json.loads(text)
    record["params"] = ast.literal_eval(record["params"])
    return Member(**record)


def storable(params: Mapping[str, Any]) -> bool:
    """A member's parameters can be kept (Python literals: numbers, strings, tuples, lists, dicts, None)."""
    try:
        return ast.literal_eval(repr(dict(params))) == dict(params)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def open_study(path: str, signature: Mapping[str, Any]) -> StudyStore:
    """The study at ``path`` (made if need be), claimed for the sweep ``signature`` describes."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise LaunchError(f"--study {path}: the folder {folder} does not exist; make it, or give another path")
    try:
        store = StudyStore(path)
    except sqlite3.DatabaseError as exc:
        raise LaunchError(f"--study {path} is not a SQLite file this sweep can use ({exc}): give another path") \
            from None
    try:
        store.claim(signature)
    except BaseException:
        store.close()
        raise
    return store
