"""The shipper: the kernel's sender of journals (``journal.py``) to their trackers, off every run's path.

Each destination (a tracker and where it records: ``registry.address``) is a lane of its own (``lane.py``): its own
thread, order, position in each journal and retry window, so a server that is down holds back only its own records
(TensorBoard's files keep being written while MLflow waits; a live server's records go while a dead one's wait).
A thread of the shipper's finds journals (this kernel's, and those an ended kernel left unsent: their lock is free)
and hands them to their lanes; a journal goes once every lane has all of it.

A journal's state (``<id>.state.json``) is one per journal: each sink's position, whether it has the whole journal,
and its notes (the runs it made), saved by the lanes under one lock.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import sys
import threading
import time
from typing import IO, Any, Final

from .journal import Journal, destinations, journal_ids, load_state, read_head, save_state, spool_dir
from .lane import GROUP_MAX, Lane
from .lane import groups as _groups
from ..core.trackers import REGISTRY
from .sinks import address, imported, new_sinks, sink_class
from .sink import Down, Sink

__all__ = ["Shipper", "shipper", "flush", "send_before_exit", "resume", "mlflow_run_id", "tracking", "Down",
           "GROUP_MAX", "_groups"]

# How often a run's new records are sent while it trains (its end wakes the shipper at once): a few calls a run, not
# one a step, so even a server on the ranks' own host costs them little.
PERIOD_S: Final = 2.0
FIRST_DELAY_S: Final = 2.0
MAX_DELAY_S: Final = 30.0


class JournalState:
    """One journal's state: each sink's position and notes, saved whole under one lock."""

    def __init__(self, spool: str, jid: str, head: dict[str, Any]) -> None:
        self.spool, self.jid = spool, jid
        self._lock = threading.Lock()
        data = load_state(spool, jid)
        data.setdefault("sinks", list(head.get("sinks") or []))
        data.setdefault("uri", head.get("uri"))
        data.setdefault("pos", {})
        data.setdefault("closed", {})
        of = data.setdefault("of", {})
        for old, sink in (("ids", "mlflow"), ("folders", "tensorboard")):   # an earlier version's state
            if old in data and sink not in of:
                of[sink] = {old: data.pop(old)}
        self.data = data
        self.to = destinations(head)

    @property
    def sinks(self) -> list[str]:
        return list(self.data["sinks"])

    def settings(self, sink: str) -> dict[str, Any]:
        return self.to.get(sink, {})

    def pos(self, sink: str) -> int:
        return int(self.data["pos"].get(sink, 0))

    def closed(self, sink: str) -> bool:
        return bool(self.data["closed"].get(sink))

    def notes(self, sink: str) -> dict[str, Any]:
        with self._lock:
            notes: dict[str, Any] = self.data["of"].setdefault(sink, {})
            return notes

    def advance(self, sink: str, position: int, closed: bool) -> None:
        with self._lock:
            self.data["pos"][sink] = position
            self.data["closed"][sink] = closed
        self.save()

    def save(self) -> None:
        with self._lock:
            save_state(self.spool, self.jid, self.data)


class Shipper:
    """``only``: the destinations this shipper sends to (the command line's); None: all. ``background``: its own
    threads find and send journals (without: only when asked, ``round``)."""

    def __init__(self, spool: str | None = None, only: set[tuple[str, str]] | None = None,
                 background: bool = True) -> None:
        self.spool = spool or spool_dir()
        self.only, self.background = only, background
        self.own: dict[str, Journal] = {}
        self.sinks: dict[str, Sink] = new_sinks()
        self.lanes: dict[tuple[str, str], Lane] = {}
        self.refs: dict[str, dict[str, str]] = {}   # record key -> tracker -> its run's id or address
        self.stopped = False
        self._states: dict[str, JournalState] = {}
        self._claimed: dict[str, IO[bytes]] = {}    # journals an ended kernel left, held while we send them
        self._lock = threading.RLock()              # the catalogue: journals, states, lanes
        self._wake = threading.Event()
        self._say_lock = threading.Lock()
        if background:
            threading.Thread(target=self._loop, name="jupyter-torchdist-tracking", daemon=True).start()

    def only_keys(self) -> set[tuple[str, str]]:
        return set(self.lanes) if self.only is None else set(self.only)

    # -- what lanes ask -----------------------------------------------------------------------------------------
    def delays(self) -> tuple[float, float, float]:
        return PERIOD_S, FIRST_DELAY_S, MAX_DELAY_S

    def path(self, jid: str) -> str:
        return os.path.join(self.spool, f"{jid}.jsonl")

    def state(self, jid: str) -> JournalState | None:
        with self._lock:
            return self._states.get(jid)

    def is_own(self, jid: str) -> bool:
        return jid in self.own

    def ready(self, tracker: str) -> None:
        if tracker in REGISTRY and isinstance(self.sinks.get(tracker), sink_class(tracker)):
            imported(tracker)   # a stand-in sink (the tests') needs no package

    def made(self, tracker: str, key: str, ref: str) -> None:
        self.refs.setdefault(key, {})[tracker] = ref

    def say(self, text: str) -> None:
        with self._say_lock:
            print(text, file=sys.stderr, flush=True)

    # -- journals -----------------------------------------------------------------------------------------------
    def open_journal(self, sinks: tuple[str, ...], uri: str | None = None,
                     to: dict[str, dict[str, Any]] | None = None) -> Journal:
        """A new journal of this kernel's, in the shipper's folder, sent from now on."""
        journal = Journal(sinks, uri, self.spool, to)
        with self._lock:
            self.own[journal.id] = journal
        self.wake()
        return journal

    def wake(self) -> None:
        self._wake.set()
        for lane in list(self.lanes.values()):
            lane.wake()

    def stop(self) -> None:
        """No more rounds on the threads (what is left stays on disk for the next shipper)."""
        self.stopped = True
        self.wake()

    def close(self) -> None:
        """Stopped, and the journals it took over let go (for another shipper to send)."""
        self.stop()
        with self._lock:
            for jid in list(self._claimed):
                self._release(jid)
                self._states.pop(jid, None)

    def _loop(self) -> None:
        while not self.stopped:
            self._wake.wait(PERIOD_S)
            self._wake.clear()
            if self.stopped:
                return
            try:
                self.discover()
            except Exception as exc:  # the shipper never dies: the records wait on disk
                self.say(f"jupyter-torchdist: tracking: {type(exc).__name__}: {exc}")

    def discover(self) -> None:
        """Journals not yet known (this kernel's, and those ended kernels left) to their destinations' lanes."""
        with self._lock:
            for jid in journal_ids(self.spool):
                if jid in self._states or not (jid in self.own or self._claim(jid)):
                    continue
                head = read_head(self.path(jid))
                if head is None:
                    continue
                st = self._states[jid] = JournalState(self.spool, jid, head)
                for name in st.sinks:
                    where = address(name, st.settings(name)) if name in self.sinks else None
                    if where is not None and (self.only is None or (name, where) in self.only):
                        self._lane(name, where).offer(jid)
        for lane in list(self.lanes.values()):
            lane.wake()

    def _lane(self, name: str, where: str) -> Lane:
        lane = self.lanes.get((name, where))
        if lane is None:
            lane = self.lanes[(name, where)] = Lane(self, name, where)
            if self.background:
                lane.start()
        return lane

    def _claim(self, jid: str) -> bool:
        if jid in self._claimed:
            return True
        try:
            f = open(self.path(jid), "rb")
        except OSError:
            return False
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            return False   # its kernel (or another one's shipper) holds it
        self._claimed[jid] = f
        return True

    def round(self) -> None:
        """Every lane sends what it can now, in the caller's thread (each lane one step at a time)."""
        self.discover()
        for lane in list(self.lanes.values()):
            lane.step()

    def finished(self, jid: str) -> None:
        """A lane has all of ``jid``: the journal goes once every lane it names has."""
        with self._lock:
            st = self._states.get(jid)
            if st is None or not all(st.closed(n) for n in st.sinks if n in self.sinks):
                return
            journal = self.own.pop(jid, None)   # every lane read its close record: its run closed it
            self._states.pop(jid, None)
            for lane in self.lanes.values():
                lane.forget(jid)
            for suffix in (".state.json", ".jsonl"):
                try:
                    os.remove(os.path.join(self.spool, jid + suffix))
                except FileNotFoundError:
                    pass
            shutil.rmtree(os.path.join(self.spool, jid), ignore_errors=True)
            if journal is not None:
                journal.release()
                journal.bound.recount()
            self._release(jid)

    def _release(self, jid: str) -> None:
        claimed = self._claimed.pop(jid, None)
        if claimed is not None:
            claimed.close()

    def drop(self, tracker: str, where: str, jids: list[str]) -> int:
        """Give up ``jids``' records for one destination (journals this shipper holds); how many it gave up."""
        self.discover()
        lane = self.lanes.get((tracker, where))
        done = 0
        for jid in jids:
            st = self.state(jid)
            if st is None or lane is None or jid not in lane.jids:
                continue
            st.advance(tracker, os.path.getsize(self.path(jid)), True)
            lane.forget(jid)
            done += 1
            if all(st.closed(n) for n in st.sinks if n in self.sinks):
                self.finished(jid)
            else:
                self._release(jid)
        return done

    def pending(self, taken: bool = False) -> list[str]:
        """This kernel's journals (``taken``: and those it took over from ended kernels) with records a lane has not
        had yet."""
        out = []
        with self._lock:
            mine = [*self.own, *(self._claimed if taken else ())]
            states = dict(self._states)
        for jid in mine:
            st = states.get(jid)
            if st is None:
                if os.path.exists(self.path(jid)):
                    out.append(jid)
                continue
            try:
                size = os.path.getsize(self.path(jid))
            except OSError:
                continue   # sent and removed meanwhile
            lanes = [n for n in st.sinks if n in self.sinks and (self.only is None or any(
                (n, w) in self.only for w in [address(n, st.settings(n))]))]
            if any(not st.closed(n) and st.pos(n) < size for n in lanes):
                out.append(jid)
        return out

    def flush(self, timeout: float, taken: bool = False) -> bool:
        """Wait until this kernel's journals (``taken``: and those it took over from ended kernels, whose records may
        be for servers long gone) are sent; False if not within ``timeout``, or at once when all that waits is for
        destinations that refused this kernel."""
        deadline = time.monotonic() + timeout
        self.discover()
        while True:
            left = self.pending(taken)
            if not left:
                return True
            stuck = [lane for lane in self.lanes.values() if set(lane.jids) & set(left)]
            if stuck and all(lane.stuck for lane in stuck):
                return False
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))


class _One:
    shipper: Shipper | None = None
    lock = threading.Lock()


def shipper() -> Shipper:
    """The kernel's shipper, started with its first tracked run."""
    with _One.lock:
        if _One.shipper is None:
            _One.shipper = Shipper()
        return _One.shipper


def resume() -> None:
    """A kernel starting: journals an earlier kernel left unsent are sent from now on (no shipper without any)."""
    if journal_ids(spool_dir()):
        shipper()


def tracking(key: str) -> dict[str, str]:
    """Each tracker's run (its id or address) made for the record ``key`` by this kernel's shipper, as far as the
    trackers have it now."""
    one = _One.shipper
    return {} if one is None else dict(one.refs.get(key, {}))


def mlflow_run_id(key: str) -> str | None:
    """The MLflow run made for the record ``key`` by this kernel's shipper; None until the server has it."""
    return tracking(key).get("mlflow")


def flush(timeout: float = 30.0) -> bool:
    """Wait until every run this kernel recorded so far has reached its trackers (at most ``timeout`` seconds); True
    when it has. Records a server did not take stay on disk and are sent later (by this kernel, or the next one)."""
    return True if _One.shipper is None else _One.shipper.flush(timeout)


def send_before_exit(timeout: float = 30.0) -> None:
    """A process about to exit (the command line's run, a detached run's runner) sends what its runs recorded first:
    the shipper's thread dies with the process. What a server did not take within ``timeout`` stays on disk, said."""
    one = _One.shipper
    if one is not None and not one.flush(timeout):
        print(f"jupyter-torchdist: the run's record is not all sent after {timeout:g} s; it is kept in {one.spool} "
              "and sent by the next run that tracks", file=sys.stderr)
