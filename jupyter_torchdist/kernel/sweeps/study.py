"""A sweep's study on disk (``--study PATH``): every member's parameters, state and metric, in one SQLite file.

Running the same cell again, after a kernel restart too, goes on where the search stopped, as Ray Tune's
``Tuner.restore`` does: members that ended (done, stopped early, failed) are not run again and keep their rows and
curves; members that were queued or training (or stopped by the user) are run again with their parameters, from
their last ``jt.commit`` when they made one (each member commits to a folder of its own, ``commit_folder``). The file
also holds Optuna's own record when the search is Optuna's (its tables beside ours). A file made by another sweep
(another space, search, metric, mode, seed or early-stopping rule) is refused, never mixed.

Two live kernels may share a study: each sweep is an *owner* that beats in the file while it runs, a member belongs
to the owner that runs it, and a resumed sweep runs again only the members whose owner stopped beating (its kernel
is gone), taking them over one by one so no member is run twice. Member numbers are given out by the file.
"""
from __future__ import annotations

import ast
import contextlib
import json
import os
import secrets
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from ...core.errors import LaunchError

__all__ = ["Member", "StudyStore", "open_study", "storable", "commit_folder", "ENDED_FOR_GOOD", "BEAT_S", "STALE_S"]

ENDED_FOR_GOOD: Final = ("done", "stopped_early", "failed")   # not run again on resume
BEAT_S: Final = 5.0     # a running sweep says it is alive this often
STALE_S: Final = 60.0   # ... and is taken for gone this long after its last word (at once when its process is)
_LEGACY_STATES: Final = {"pruned": "stopped_early"}   # states an earlier release wrote
_TABLES: Final = """
CREATE TABLE IF NOT EXISTS jtd_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jtd_members (number INTEGER PRIMARY KEY, record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jtd_owners (owner TEXT PRIMARY KEY, host TEXT NOT NULL, pid INTEGER NOT NULL,
                                       beat REAL NOT NULL);
"""


@dataclass
class Member:
    """A member of the study as it is kept: enough to show its row and curve, and to run it again."""
    number: int                          # 1, 2, ... in the order drawn, across kernels
    params: dict[str, Any]
    state: str = "queued"                # queued, running, done, failed, stopped, stopped_early
    token: Any = None                    # Optuna's trial number
    steps: int | None = None
    best: float | None = None
    last: float | None = None
    final: float | None = None           # the figure told to the search when it ended
    stopped_early_at: int | None = None  # the step its early-stopping rule stopped it at
    why: str | None = None
    seconds: float | None = None
    ended_at: float | None = None
    curve: list[list[float]] = field(default_factory=list)
    owner: str | None = None             # the sweep that runs it (None: an earlier release's record)


class StudyStore:
    """The open file, as one owner (this sweep); every write is its own transaction (a killed kernel loses at most
    the member it was saving)."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30, isolation_level=None)
        self._db.executescript(_TABLES)

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One transaction that holds the file's write lock from its first read (BEGIN IMMEDIATE), so what it reads
        another kernel cannot change before it writes."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def claim(self, signature: Mapping[str, Any]) -> None:
        """Mark the file as this sweep's, or refuse it when another sweep made it. What a file made by an earlier
        release does not record (its rule, say) is taken as this sweep's and recorded from now on."""
        with self._write() as db:
            row = db.execute("SELECT value FROM jtd_meta WHERE key = 'sweep'").fetchone()
            kept = json.loads(row[0]) if row is not None else {}
            differ = [k for k in sorted(set(kept) & set(signature)) if kept[k] != signature[k]]
            if not differ:
                db.execute("INSERT OR REPLACE INTO jtd_meta VALUES ('sweep', ?)",
                           (json.dumps({**dict(signature), **kept}),))
                db.execute("INSERT OR REPLACE INTO jtd_owners VALUES (?, ?, ?, ?)",
                           (self.owner, socket.gethostname(), os.getpid(), time.time()))
                return
        said = "; ".join(f"{k}: {kept.get(k)!r} there, {signature.get(k)!r} here" for k in differ)
        raise LaunchError(f"the study {self.path} was made by another sweep ({said}). Give this sweep its own "
                          "--study file, or delete that one to start over.")

    def draw_seed(self, seed: int) -> int:
        """The seed the study's random draws use: the first sweep's (``seed``, when the file has none yet), so a
        sweep resumed without --seed draws in the same order and never repeats a member."""
        with self._write() as db:
            row = db.execute("SELECT value FROM jtd_meta WHERE key = 'draw_seed'").fetchone()
            if row is not None:
                return int(row[0])
            db.execute("INSERT INTO jtd_meta VALUES ('draw_seed', ?)", (str(seed),))
            return seed

    def members(self) -> list[Member]:
        with self._lock:
            rows = self._db.execute("SELECT record FROM jtd_members ORDER BY number").fetchall()
        return [_load(text) for (text,) in rows]

    def count(self) -> int:
        """Members drawn so far, by every kernel."""
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM jtd_members").fetchone()[0])

    def live_owners(self) -> set[str]:
        """The sweeps still running on this file (this one included): they beat, and their process is alive."""
        now, here = time.time(), socket.gethostname()
        with self._lock:
            rows = self._db.execute("SELECT owner, host, pid, beat FROM jtd_owners").fetchall()
        return {owner for owner, host, pid, beat in rows
                if owner == self.owner or (now - beat < STALE_S and (host != here or _alive(pid)))}

    def take(self, members: list[Member]) -> list[Member]:
        """Of ``members`` (left unfinished by sweeps now gone), those this sweep takes over to run again: each is
        taken in one transaction, and only if no other kernel took it first."""
        taken = []
        for member in members:
            with self._write() as db:
                row = db.execute("SELECT record FROM jtd_members WHERE number = ?", (member.number,)).fetchone()
                if row is None or _load(row[0]).owner != member.owner:
                    continue
                member.owner = self.owner
                db.execute("UPDATE jtd_members SET record = ? WHERE number = ?", (_dump(member), member.number))
            taken.append(member)
        return taken

    def insert(self, member: Member) -> Member:
        """A new member, numbered after every member any kernel drew (so two kernels never share a number)."""
        with self._write() as db:
            member.number = int(db.execute("SELECT COALESCE(MAX(number), 0) + 1 FROM jtd_members").fetchone()[0])
            member.owner = self.owner
            db.execute("INSERT INTO jtd_members VALUES (?, ?)", (member.number, _dump(member)))
        return member

    def save(self, member: Member) -> None:
        member.owner = self.owner
        text = _dump(member)
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO jtd_members VALUES (?, ?)", (member.number, text))

    def beat(self) -> None:
        """This sweep is alive (its members are not another kernel's to run)."""
        with self._lock:
            self._db.execute("UPDATE jtd_owners SET beat = ? WHERE owner = ?", (time.time(), self.owner))

    def close(self) -> None:
        """The sweep has ended: its unfinished members (stopped ones) are the next sweep's to run again."""
        with self._lock:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("DELETE FROM jtd_owners WHERE owner = ?", (self.owner,))
            self._db.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True   # another user's process: it exists
    return True


def _dump(member: Member) -> str:
    record = asdict(member)
    record["params"] = repr(member.params)  # Python literals round-trip (tuples stay tuples), JSON's would not
    return json.dumps(record)


def _load(text: str) -> Member:
    record = json.loads(text)
    record["params"] = ast.literal_eval(record["params"])
    if "pruned_at" in record:   # an earlier release's name for it
        record["stopped_early_at"] = record.pop("pruned_at")
    record["state"] = _LEGACY_STATES.get(record.get("state", ""), record.get("state", "queued"))
    return Member(**record)


def storable(params: Mapping[str, Any]) -> bool:
    """A member's parameters can be kept (Python literals: numbers, strings, tuples, lists, dicts, None)."""
    try:
        return ast.literal_eval(repr(dict(params))) == dict(params)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def commit_folder(study: str | None, checkpoint_dir: str | None, number: int, sweep: str) -> str | None:
    """Where member ``number`` commits (``jt.commit``): a folder of its own, so members never restore each other's
    state. With ``--study`` it is the study's (``lr.db`` -> ``lr-commits/member-3``, under ``--checkpoint-dir`` when
    given, else beside the file), so the member run again on resume finds its commits; without a study, a folder of
    this sweep's (``sweep``) under ``--checkpoint-dir``; None with neither (each run's own, as any run's)."""
    if study is not None:
        stem = os.path.splitext(os.path.basename(study))[0]
        base = checkpoint_dir.rstrip("/") if checkpoint_dir is not None else os.path.dirname(os.path.abspath(study))
        return f"{base}/{stem}-commits/member-{number}"
    if checkpoint_dir is not None:
        return f"{checkpoint_dir.rstrip('/')}/sweep-{sweep}/member-{number}"
    return None


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
