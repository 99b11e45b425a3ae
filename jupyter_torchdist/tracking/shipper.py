"""The shipper: one thread of the kernel's that sends journals (``journal.py``) to their sinks, off every run's path.

Each sink of a journal has its own position, so a server that is down holds back only its own sink: TensorBoard's
files keep being written while MLflow waits. An outage is said once ("does not answer ... records kept in ...")
and its end once; meanwhile the shipper tries again, every few seconds at first and then less often (at most every
``MAX_DELAY_S``). A record a sink refuses for what it holds (not because it is down) is said and skipped, so one bad
value never holds back the rest. Journals a kernel left unsent when it ended are sent by the next one's shipper.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, Any, Final, Protocol

from .journal import Journal, journal_ids, load_state, read_records, save_state, spool_dir
from .mlflow_sink import Down, MlflowSink
from .tb_sink import TensorBoardSink

__all__ = ["Shipper", "shipper", "flush", "resume", "mlflow_run_id"]

# How often a run's new records are sent while it trains (its end wakes the shipper at once): a few calls a run, not
# one a step, so even a server on the ranks' own host costs them little.
PERIOD_S: Final = 2.0
FIRST_DELAY_S: Final = 2.0
MAX_DELAY_S: Final = 30.0
GROUP_MAX: Final = 200       # metric records sent in one call


class Sink(Protocol):
    name: str

    def check(self, uri: str | None) -> None: ...
    def apply(self, records: list[dict[str, Any]], state: dict[str, Any]) -> None: ...


def _groups(records: Iterator[tuple[dict[str, Any], int]]) -> Iterator[tuple[list[dict[str, Any]], int]]:
    """Consecutive metric records of one run together (one call), every other record alone."""
    group: list[dict[str, Any]] = []
    end = 0
    for rec, after in records:
        if group and (rec.get("k") != "m" or rec.get("key") != group[0].get("key") or len(group) >= GROUP_MAX):
            yield group, end
            group = []
        group.append(rec)
        end = after
        if rec.get("k") != "m":
            yield group, end
            group = []
    if group:
        yield group, end


class Shipper:
    def __init__(self, spool: str | None = None) -> None:
        self.spool = spool or spool_dir()
        self.own: dict[str, Journal] = {}
        self.sinks: dict[str, Sink] = {"mlflow": MlflowSink(), "tensorboard": TensorBoardSink()}
        self.down: dict[str, str] = {}            # sink -> why, while it does not answer
        self._retry_at: dict[str, float] = {}
        self._delay: dict[str, float] = {}
        self._claimed: dict[str, IO[bytes]] = {}  # journals an ended kernel left, held while we send them
        self._lock = threading.Lock()             # one round at a time (the thread's, or flush's)
        self._wake = threading.Event()
        self._stopped = False
        threading.Thread(target=self._loop, name="jupyter-torchdist-tracking", daemon=True).start()

    def open_journal(self, sinks: tuple[str, ...], uri: str | None) -> Journal:
        """A new journal of this kernel's, in the shipper's folder, sent from now on."""
        journal = Journal(sinks, uri, self.spool)
        self.own[journal.id] = journal
        self.wake()
        return journal

    def wake(self) -> None:
        self._wake.set()

    def pending(self) -> list[str]:
        """This kernel's journals (and those it took over) with records a sink has not had yet."""
        out = []
        for jid in journal_ids(self.spool):
            if jid not in self.own and jid not in self._claimed:
                continue
            state = load_state(self.spool, jid)
            try:
                size = os.path.getsize(os.path.join(self.spool, f"{jid}.jsonl"))
            except OSError:
                continue   # sent and removed meanwhile
            sinks = state.get("sinks")
            if sinks is None or any(state.get("pos", {}).get(s, 0) < size for s in sinks if s in self.sinks):
                out.append(jid)
        return out

    def stop(self) -> None:
        """No more rounds on the thread (what is left stays on disk for the next shipper)."""
        self._stopped = True
        self.wake()

    def _loop(self) -> None:
        while not self._stopped:
            self._wake.wait(PERIOD_S)
            self._wake.clear()
            if self._stopped:
                return
            try:
                self.round()
            except Exception as exc:  # the shipper never dies: the records wait on disk
                print(f"jupyter-torchdist: tracking: {type(exc).__name__}: {exc}", file=sys.stderr)

    def round(self) -> None:
        with self._lock:
            for jid in journal_ids(self.spool):
                if jid in self.own or self._claim(jid):
                    self._ship(jid)

    def _claim(self, jid: str) -> bool:
        if jid in self._claimed:
            return True
        try:
            f = open(os.path.join(self.spool, f"{jid}.jsonl"), "rb")
        except OSError:
            return False
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            return False   # its kernel (or another one's shipper) holds it
        self._claimed[jid] = f
        return True

    def _ship(self, jid: str) -> None:
        path = os.path.join(self.spool, f"{jid}.jsonl")
        state = load_state(self.spool, jid)
        if "sinks" not in state:
            head = next(read_records(path, 0), None)
            if head is None:
                return
            state.update(sinks=head[0].get("sinks") or [], uri=head[0].get("uri"), pos={}, closed={})
        done = all([self._ship_sink(jid, path, name, state) for name in state["sinks"] if name in self.sinks])
        if done:
            self._remove(jid)

    def _ship_sink(self, jid: str, path: str, name: str, state: dict[str, Any]) -> bool:
        """Send what ``name`` has not had yet; True once it has the whole closed journal."""
        if state["closed"].get(name):
            return True
        if time.monotonic() < self._retry_at.get(name, 0.0):
            return False
        sink = self.sinks[name]
        position = state["pos"].get(name, 0)
        try:
            checked = False
            for group, after in _groups(read_records(path, position)):
                kind = group[0].get("k")
                if kind not in ("head", "close"):
                    if not checked:
                        sink.check(state.get("uri"))
                        checked = True
                    self._apply(sink, group, state)
                state["pos"][name] = after
                state["closed"][name] = kind == "close"
                save_state(self.spool, jid, state)
        except Down as exc:
            self._outage(name, str(exc))
            return False
        self._answered(name)
        return bool(state["closed"].get(name))

    def _apply(self, sink: Sink, group: list[dict[str, Any]], state: dict[str, Any]) -> None:
        try:
            sink.apply(group, state)
        except Down:
            raise
        except Exception as exc:
            print(f"jupyter-torchdist: {sink.name} refused a {group[0].get('k')} record ({type(exc).__name__}: "
                  f"{str(exc)[:300]}); it is skipped", file=sys.stderr)

    def _outage(self, name: str, why: str) -> None:
        delay = min(MAX_DELAY_S, self._delay.get(name, FIRST_DELAY_S / 2) * 2)
        self._delay[name], self._retry_at[name] = delay, time.monotonic() + delay
        if name not in self.down:
            self.down[name] = why
            print(f"jupyter-torchdist warning: {name}: {why}. Runs go on; their records are kept in {self.spool} "
                  "and sent when it answers again.", file=sys.stderr)

    def _answered(self, name: str) -> None:
        self._delay.pop(name, None)
        self._retry_at.pop(name, None)
        if self.down.pop(name, None) is not None:
            print(f"jupyter-torchdist: {name} answers again: the records kept meanwhile are sent.", file=sys.stderr)

    def _remove(self, jid: str) -> None:
        journal = self.own.pop(jid, None)
        if journal is not None and not journal.closed:
            self.own[jid] = journal   # closed by its run while we read: sent next round
            return
        for suffix in (".state.json", ".jsonl"):
            try:
                os.remove(os.path.join(self.spool, jid + suffix))
            except FileNotFoundError:
                pass
        shutil.rmtree(os.path.join(self.spool, jid), ignore_errors=True)
        if journal is not None:
            journal.release()
        claimed = self._claimed.pop(jid, None)
        if claimed is not None:
            claimed.close()

    def flush(self, timeout: float) -> bool:
        """Wait until this kernel's journals (and those it took over) are sent; False if not within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            self.round()
            if not self.pending():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


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


def mlflow_run_id(key: str) -> str | None:
    """The MLflow run made for the record ``key`` by this kernel's shipper; None until the server has it."""
    one = _One.shipper
    sink = None if one is None else one.sinks.get("mlflow")
    return None if not isinstance(sink, MlflowSink) else sink.created.get(key)


def flush(timeout: float = 30.0) -> bool:
    """Wait until every run recorded so far has reached its trackers (at most ``timeout`` seconds); True when it has.
    Records a server did not take stay on disk and are sent later (by this kernel, or the next one)."""
    return True if _One.shipper is None else _One.shipper.flush(timeout)
