"""A run of this kernel, as the handle the notebook holds (``jupyter_torchdist.Run``), and ``runs()``'s table.

A foreground ``%%distribute`` cell, a ``--background`` one, ``run(..., background=True)`` and each run of a sweep get
a ``Run``: its number, title and state (queued, running, done, failed, stopped; a sweep's member may be
stopped_early), and
once it has ended its value or its error and its ``RunResult``. The handle is filled in by whoever drives the run
(``driver.py``); the notebook waits on it, asks for its value or stops it, from any thread. It is a
``Handle`` (``kernel/handle.py``), as a sweep is. The kernel's list of its runs is ``history.py``.
"""
from __future__ import annotations

import html
import queue
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from typing import Final

from ...core import contract as C
from ...core.contract import Inbound
from ...core.errors import MemberFailed, MemberStoppedEarly, RunInterrupted
from ...core.grid import describe
from ...core.options import RunOptions
from ...views.report_text import text_table
from ..handle import Handle
from .turns import turns
from ..state.run import RunState

__all__ = ["Run", "RunList", "ENDED", "RunResult"]

ENDED: Final = ("done", "failed", "stopped", MemberStoppedEarly.state)


class Run(Handle):
    """A run of this kernel: ``state``, ``done()``, ``wait()``, ``result()``, ``stop()``; ``details`` once ended."""

    def __init__(self, number: int, title: str, options: RunOptions, params: Mapping[str, Any] | None = None,
                 on_end: Callable[[Run], None] | None = None) -> None:
        super().__init__()
        self.number = number   # the kernel's own count (``%distribute_wait 3``); ``id`` is durable (``Handle``)
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
        self._stop_by: str | None = None
        self.where: str | None = None   # where its ranks run, in words ("spark local[4]"), once they start
        self.ui_url: str | None = None  # the backend's page of it (the Spark UI), once it starts, if there is one
        self._inbox: queue.SimpleQueue[Inbound] | None = None
        self._lock = threading.Lock()
        self._outcome: Any = None
        self._on_end = on_end   # the registry keeps the last ended run's result
        self._details: RunResult | None = None
        self._ending: tuple[str, str] | None = None   # a sweep's own end for it: ("stopped_early" | "failed", why)
        self._stop_early = False   # the only stop asked is its sweep's rule's (moot once its ranks took every step)
        self.recorded: Callable[[], None] | None = None   # ends the run's record, once its outcome is set
        # called once its outcome is set, before anyone waiting on it wakes (-o NAME is set by then)
        self.on_outcome: list[Callable[[Run], None]] = []
        self.record_key: str | None = None   # its record's key (--track): each tracker's run is found by it
        self.driver: Callable[[], Any] | None = None   # a weak reference to what drives it (driver.RunDriver: its
        # view's latest frame, its record), for the runs panel; gone with the driver

    # -- what the notebook asks ----------------------------------------------------------------------
    @property
    def state(self) -> str:
        """queued, running, done, failed, stopped, or (a sweep's member its rule stopped early) stopped_early."""
        return self._state

    @property
    def value(self) -> Any:
        """Its value (rank 0's, or every rank's with ``all_ranks``) once it is done; None before, and when it ended
        otherwise. ``result()`` waits for it, and raises a failed run's error."""
        return self._outcome if self._state == "done" else None

    @property
    def details(self) -> RunResult | None:
        """The ended run's ``RunResult`` (every rank's value, state and log; ``.report()``), failed runs too."""
        return self._details

    @property
    def tracking(self) -> dict[str, str]:
        """Where this run is recorded (``--track``), tracker by tracker, once each has it: MLflow's run id,
        TensorBoard's folder, a W&B run's URL (an offline run: its folder), by tracker name. Records go every few
        seconds and wait while a tracker does not answer; ``flush_tracking()`` waits for them. Empty when not
        tracked."""
        if self.record_key is None:
            return {}
        from ...tracking import tracking

        return tracking(self.record_key)

    @property
    def mlflow_run_id(self) -> str | None:
        """The MLflow run this run is recorded in (``tracking["mlflow"]``): its id once the tracking server has it,
        None before, or when the run is not tracked in MLflow."""
        return self.tracking.get("mlflow")

    def stop(self, by: str = "run.stop()", *, early: bool = False) -> bool:
        """Stop this run, and nothing else: its ranks are stopped (a queued run never starts). Returns at once;
        ``wait()`` for its end. False when it had already ended."""
        with self._lock:
            if self._ended.is_set():
                return False
            self._stop_by = self._stop_by or by
            self._stop_early = early and (self._stop_early or self._stop_by == by)
            inbox = self._inbox
        if inbox is not None:
            inbox.put(Inbound(-1, C.BACKEND, self._stop_message()))
        turns.wake()
        return True

    def _stop_message(self) -> C.StopWantedMsg:
        msg: C.StopWantedMsg = {"t": C.STOP_WANTED, "by": self._stop_by or "run.stop()"}
        if self._stop_early:
            msg["early"] = True
        return msg

    def end_early(self, state: str, why: str) -> bool:
        """A sweep ends this member: every rank is stopped as by ``stop()``, and the run ends ``state``
        ("stopped_early": its rule stopped it; "failed": e.g. the metric its rule needs never came) with ``why`` as
        its error. A rule's stop ("stopped_early") is moot for a member whose every rank has ended or reported its
        last step by the time the stop reaches it: that member ends done, with its value."""
        with self._lock:
            if self._ending is None and not self._ended.is_set():
                self._ending = (state, why)
        return self.stop(f"the sweep ({why})", early=state == MemberStoppedEarly.state)

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
            inbox.put(Inbound(-1, C.BACKEND, self._stop_message()))

    def running(self) -> None:
        self._state, self.started_at, self.waiting_for = "running", self.started_at or time.time(), None
        self._redisplay()

    def finish(self, value: Any, details: RunResult | None, error: BaseException | None) -> None:
        with self._lock:
            if self._ending is not None and error is not None and _stopped(error):
                state, why = self._ending
                kind = MemberStoppedEarly if state == MemberStoppedEarly.state else MemberFailed
                error = kind(f"{state.replace('_', ' ')}: {why}", getattr(error, "failures", None),
                             getattr(error, "world_size", 0), result=getattr(error, "result", None))
            self._outcome, self._details, self._error = value, details, error
            self._state = "done" if error is None else MemberStoppedEarly.state \
                if isinstance(error, MemberStoppedEarly) else "stopped" if _stopped(error) else "failed"
            self.ended_at, self._inbox = time.time(), None
        if self._on_end is not None:
            self._on_end(self)
        if self.recorded is not None:
            self.recorded()   # the run's record ends before anyone waiting on it wakes (--track)
        for hook in self.on_outcome:
            try:
                hook(self)
            except Exception as exc:  # a hook never costs the run its end
                print(f"jupyter-torchdist warning: after run {self.number}: {type(exc).__name__}: {exc}",
                      file=sys.stderr)
        self._end()

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
            return (shown if shown is not None else repr(self._outcome))[:200]
        return (self.waiting_for or "")[:200]

    def seconds(self) -> float | None:
        """How long it has run: once ended, as its report says (its ranks' start to its end); while it runs, since
        its turn came (its ranks' start included)."""
        state = getattr(self._details, "state", None)
        if state is not None and state.ended_at is not None and state.started_at:
            return float(state.ended_at - state.started_at)
        if self.started_at is None:
            return None
        return (self.ended_at or time.time()) - self.started_at

    def _value(self) -> Any:
        return self._outcome

    def _name(self) -> str:
        return f"run {self.number}"

    def __repr__(self) -> str:
        params = f" [{describe(self.params)}]" if self.params else ""
        where = f" on {self.where}" if self.where else ""
        return f"<Run {self.number} ({self.id}) {self.title}{params}{where}: {self._state}>"


def _stopped(error: BaseException) -> bool:
    return isinstance(error, (RunInterrupted, KeyboardInterrupt))


class RunList(list[Run]):
    """``runs()``: a list of ``Run`` that shows as a table in a notebook."""

    _COLUMNS: Final = ("run", "id", "title", "state", "ranks", "on", "seconds", "outcome")

    def _rows(self) -> list[tuple[str, ...]]:
        rows: list[tuple[str, ...]] = []
        for r in self:
            secs = r.seconds()
            title = r.title + (f" [{describe(r.params)}]" if r.params else "") + (" (background)" if r.background
                                                                                   else "")
            rows.append((str(r.number), r.id, title, r.state, str(r.options.n), r.where or "",
                         "" if secs is None else f"{secs:.1f}", r.summary()))
        return rows

    def __repr__(self) -> str:
        return "\n".join(text_table(self._COLUMNS, self._rows(), widest=60))

    def _repr_html_(self) -> str:
        head = "".join(f"<th style='text-align:left'>{c}</th>" for c in self._COLUMNS)
        body = "".join("<tr>" + "".join(f"<td style='text-align:left'>{html.escape(cell)}</td>" for cell in row)
                       + "</tr>" for row in self._rows())
        return f"<table class='jp-TorchDist-runs'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


# -- what a run leaves behind ------------------------------------------------------------------------------------------
# What a run leaves behind: the value, every rank's value, the state and every rank's log.
@dataclass
class RunResult:
    """A finished run, succeeded or not (a failed run's is on the error: ``exc.result``)."""

    value: Any                      # rank 0's value, or the list of every rank's with all_ranks
    values: dict[int, Any]          # every value that came back, by rank
    state: RunState                 # the run as the view last drew it
    logs: dict[int, list[tuple[str, str]]] = field(default_factory=dict)  # (stream, line) per rank, all kept
    attempts: list[Any] = field(default_factory=list)  # --max-restarts: the attempts that failed and were restarted

    def loss_curve(self, rank: int = 0) -> list[tuple[float, float]]:
        """The ``(step, loss)`` points rank ``rank`` reported with ``report(step=..., loss=...)``, as the live view drew
        its curve: every point up to 400, the whole curve at half the resolution each time it passes that. Empty when
        the rank reported no loss. For a plot of the run after it ended: ``plt.plot(*zip(*result.loss_curve()))``."""
        ranks = self.state.ranks
        return list(ranks[rank].history) if 0 <= rank < len(ranks) else []

    def report(self) -> Any:
        """The run report (displays itself in a notebook; ``repr`` is the text version)."""
        from ...views.report import RunReport

        return RunReport(self.state.snapshot())
