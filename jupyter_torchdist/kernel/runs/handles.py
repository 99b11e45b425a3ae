"""The runs this kernel has started, each as a handle the notebook holds (``jupyter_torchdist.Run``).

A foreground ``%%distribute`` cell, a ``--background`` one, ``run(..., background=True)`` and each run of a sweep get
a ``Run``: its number, title and state (queued, running, done, failed, stopped; a sweep's member may be pruned), and
once it has ended its value or its error and its ``RunResult``. The handle is filled in by whoever drives the run
(``background.py``, ``launch.py``); the notebook waits on it, asks for its value or stops it, from any thread.
``runs()`` lists them, oldest first.
Nothing outlives the kernel: at exit every run still going is stopped (``stop_all``).
"""
from __future__ import annotations

import atexit
import html
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from ...core import contract as C
from ...core.contract import Inbound
from ...core.errors import MemberFailed, MemberPruned, RunInterrupted
from ...core.grid import describe
from ...views.table import text_table
from ...core.options import RunOptions
from .result import RunResult
from .turns import turns

__all__ = ["Run", "RunList", "runs", "new_run", "find", "last_background", "last_result", "stop_all", "ENDED"]

ENDED: Final = ("done", "failed", "stopped", "pruned")
KEEP_ENDED: Final = 200   # ended runs whose results (logs included) the kernel keeps; older ones drop their result


class Run:
    """A run of this kernel: ``state``, ``done()``, ``wait()``, ``result()``, ``stop()``; ``details`` once ended."""

    def __init__(self, number: int, title: str, options: RunOptions, params: Mapping[str, Any] | None = None) -> None:
        self.id = number
        self.title = title
        self.options = options
        self.params: dict[str, Any] | None = dict(params) if params is not None else None  # a sweep's combination
        self.background = options.background
        self.sweep: Any = None   # the sweep it is one run of (kernel.sweep.Sweep), if any
        self.submitted_at = time.time()
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self._state = "queued"
        self.waiting_for: str | None = None   # while queued: what it waits for, as its view says it
        self._ended = threading.Event()
        self._stop_by: str | None = None
        self._inbox: queue.SimpleQueue[Inbound] | None = None
        self._lock = threading.Lock()
        self._value: Any = None
        self._error: BaseException | None = None
        self._details: RunResult | None = None
        self._ending: tuple[str, str] | None = None   # a sweep's own end for it: ("pruned" | "failed", why)
        self.recorded: Callable[[], None] | None = None   # ends the run's record, once its outcome is set
        self.record_key: str | None = None   # its MLflow record's key (--track mlflow)

    # -- what the notebook asks ----------------------------------------------------------------------
    @property
    def state(self) -> str:
        """queued, running, done, failed, stopped, or (a sweep's member its rule stopped early) pruned."""
        return self._state

    @property
    def details(self) -> RunResult | None:
        """The ended run's ``RunResult`` (every rank's value, state and log; ``.report()``), failed runs too."""
        return self._details

    @property
    def mlflow_run_id(self) -> str | None:
        """The MLflow run this run is recorded in (``--track mlflow``): its id once the tracking server has it
        (records go every few seconds, and wait while the server is down; ``flush_tracking()`` waits for them),
        None before, or when the run is not tracked in MLflow."""
        if self.record_key is None:
            return None
        from ...tracking.shipper import mlflow_run_id

        return mlflow_run_id(self.record_key)

    @property
    def error(self) -> BaseException | None:
        """The error ``result()`` raises, once the run has ended without success."""
        return self._error

    def done(self) -> bool:
        return self._ended.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the run ends (at most ``timeout`` seconds); True when it has ended."""
        return self._ended.wait(timeout)

    def result(self, timeout: float | None = None) -> Any:
        """The value, as the foreground cell would give it; a run that failed raises its error (root cause first).
        ``TimeoutError`` when it has not ended within ``timeout`` seconds (it goes on)."""
        if not self._ended.wait(timeout):
            raise TimeoutError(f"run {self.id} has not ended after {timeout:g} s (it is {self._state}; it goes on)")
        if self._error is not None:
            raise self._error.with_traceback(None)
        return self._value

    def stop(self, by: str = "run.stop()") -> bool:
        """Stop this run, and nothing else: its ranks are stopped (a queued run never starts). Returns at once;
        ``wait()`` for its end. False when it had already ended."""
        with self._lock:
            if self._ended.is_set():
                return False
            self._stop_by = self._stop_by or by
            inbox = self._inbox
        if inbox is not None:
            inbox.put(Inbound(-1, C.BACKEND, {"t": C.STOP_WANTED, "by": self._stop_by}))
        turns.wake()
        return True

    def end_early(self, state: str, why: str) -> bool:
        """A sweep ends this member: every rank is stopped as by ``stop()``, and the run ends ``state`` ("pruned":
        its rule stopped it; "failed": e.g. the metric its rule needs never came) with ``why`` as its error."""
        with self._lock:
            if self._ending is None and not self._ended.is_set():
                self._ending = (state, why)
        return self.stop(f"the sweep ({why})")

    def ask(self, msg: C.InboundMessage) -> bool:
        """Hand the running run a message of the kernel's own side (WHERE_WANTED); False when it is not running."""
        inbox = self._inbox
        if inbox is None or self._ended.is_set():
            return False
        inbox.put(Inbound(-1, C.BACKEND, msg))
        return True

    # -- what the driver of the run says --------------------------------------------------------------------
    @property
    def stop_asked(self) -> str | None:
        """Who asked for a stop, if anybody did."""
        return self._stop_by

    def attach(self, inbox: queue.SimpleQueue[Inbound]) -> None:
        """The run's current ranks listen on ``inbox`` (each attempt has its own): a stop goes there."""
        with self._lock:
            self._inbox = inbox
            by = self._stop_by
        if by is not None:
            inbox.put(Inbound(-1, C.BACKEND, {"t": C.STOP_WANTED, "by": by}))

    def running(self) -> None:
        self._state, self.started_at, self.waiting_for = "running", self.started_at or time.time(), None

    def finish(self, value: Any, details: RunResult | None, error: BaseException | None) -> None:
        with self._lock:
            if self._ending is not None and error is not None and _stopped(error):
                state, why = self._ending
                kind = MemberPruned if state == "pruned" else MemberFailed
                error = kind(f"{state}: {why}", getattr(error, "failures", None), getattr(error, "world_size", 0),
                             result=getattr(error, "result", None))
            self._value, self._details, self._error = value, details, error
            self._state = "done" if error is None else "pruned" if isinstance(error, MemberPruned) else \
                "stopped" if _stopped(error) else "failed"
            self.ended_at, self._inbox = time.time(), None
        if details is not None:
            _registry.last_ended = details
        if self.recorded is not None:
            self.recorded()   # the run's record ends before anyone waiting on it wakes (--track)
        self._ended.set()

    def forget(self) -> None:
        """An old ended run gives back what it held (its result and logs); its line in ``runs()`` stays."""
        self._details = None

    # -- how it shows ------------------------------------------------------------------------------------
    def summary(self) -> str:
        """The outcome in a few words: the value's repr, or the error's headline."""
        if self._error is not None:
            return str(getattr(self._error, "headline", "") or self._error).splitlines()[0][:200]
        if self._state == "done":
            state = getattr(self._details, "state", None)
            shown = getattr(state, "value_repr", None)
            return (shown if shown is not None else repr(self._value))[:200]
        return (self.waiting_for or "")[:200]

    def seconds(self) -> float | None:
        if self.started_at is None:
            return None
        return (self.ended_at or time.time()) - self.started_at

    def __repr__(self) -> str:
        params = f" [{describe(self.params)}]" if self.params else ""
        return f"<Run {self.id} {self.title}{params}: {self._state}>"


def _stopped(error: BaseException) -> bool:
    return isinstance(error, (RunInterrupted, KeyboardInterrupt))


class RunList(list[Run]):
    """``runs()``: a list of ``Run`` that shows as a table in a notebook."""

    _COLUMNS: Final = ("run", "title", "state", "ranks", "seconds", "outcome")

    def _rows(self) -> list[tuple[str, ...]]:
        rows: list[tuple[str, ...]] = []
        for r in self:
            secs = r.seconds()
            title = r.title + (f" [{describe(r.params)}]" if r.params else "") + (" (background)" if r.background
                                                                                   else "")
            rows.append((str(r.id), title, r.state, str(r.options.n), "" if secs is None else f"{secs:.1f}",
                         r.summary()))
        return rows

    def __repr__(self) -> str:
        return "\n".join(text_table(self._COLUMNS, self._rows(), widest=60))

    def _repr_html_(self) -> str:
        head = "".join(f"<th style='text-align:left'>{c}</th>" for c in self._COLUMNS)
        body = "".join("<tr>" + "".join(f"<td style='text-align:left'>{html.escape(cell)}</td>" for cell in row)
                       + "</tr>" for row in self._rows())
        return f"<table class='jp-TorchDist-runs'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class _Registry:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.all: list[Run] = []
        self.count = 0
        self.last_ended: RunResult | None = None   # last_run()

    def new(self, title: str, options: RunOptions, params: Mapping[str, Any] | None) -> Run:
        with self.lock:
            self.count += 1
            run = Run(self.count, title, options, params)
            self.all.append(run)
            ended = [r for r in self.all if r.done() and r.details is not None]
            for old in ended[:-KEEP_ENDED]:
                old.forget()
            return run


_registry = _Registry()


def new_run(title: str, options: RunOptions, params: Mapping[str, Any] | None = None) -> Run:
    """A new run of this kernel, queued (its driver moves it on)."""
    return _registry.new(title, options, params)


def last_result() -> RunResult | None:
    """The result of the run that ended last (``last_run()``), failed runs included."""
    return _registry.last_ended


def runs() -> RunList:
    """This kernel's runs, oldest first (foreground and background, a sweep's each)."""
    with _registry.lock:
        return RunList(_registry.all)


def background_going() -> int:
    """Background runs and sweeps of this kernel that have not ended (a sweep counts once)."""
    going = runs()
    sweeps = {id(r.sweep) for r in going if r.sweep is not None and not r.sweep.done()}
    return sum(1 for r in going if r.background and r.sweep is None and not r.done()) + len(sweeps)


def find(number: int) -> Run | None:
    with _registry.lock:
        return next((r for r in _registry.all if r.id == number), None)


def last_background() -> Run | None:
    """The last background run started (``%distribute_wait`` without a number)."""
    with _registry.lock:
        return next((r for r in reversed(_registry.all) if r.background), None)


def stop_all(by: str, wait_s: float = 5.0) -> None:
    """Stop every run still going and wait (``wait_s`` in all) for them to end."""
    going = [r for r in runs() if not r.done()]
    for run in going:
        run.stop(by)
    deadline = time.time() + wait_s
    for run in going:
        run.wait(max(0.0, deadline - time.time()))


@atexit.register
def _at_exit() -> None:
    """Nothing outlives the kernel: a kernel that exits stops its runs first."""
    try:
        stop_all("the kernel's shutdown")
    except Exception:
        pass
