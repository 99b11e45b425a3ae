"""Drive one run from its turn to its end, in the foreground or on a thread of its own.

A run waits for its turn (``turns.turns``: a sweep's places, then the backend's task slots), starts its ranks (with
``--max-restarts``, again after a lost rank) and fills in its handle (``run.Run``). Its view is one view from the
first frame to the report (``ContinuedView``): while the run waits it shows the run queued and what it waits for.
``launch`` (``launch.py``) drives in the caller's thread; ``background_run`` then ``go`` on a thread of its own, after
drawing the first frame in the caller's cell (the handle comes back at once).
"""
from __future__ import annotations

import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ...core.contract import Inbound
from ...core.errors import LaunchError, RunInterrupted
from ...launchers import backend_for, before_run
from ...core.options import RunOptions
from ...views import RunView
from .result import RunResult
from .restarts import ContinuedView
from .run import Run
from .registry import new_run
from .turns import Ticket, turns
from ..pickling import Packed
from ..state.run import RunState

__all__ = ["Pool", "Pools", "ScheduledRun", "drive", "background_run", "start_on_thread", "slots_pool"]

Capacity = Callable[[], "int | None"]


@dataclass(frozen=True)
class Pool:
    """A pool the run takes a place in before it starts, and how many places the pool has."""

    ticket: Ticket
    capacity: Capacity


@dataclass
class ScheduledRun:
    """One run as the driver holds it: its handle, what it runs, and its one view."""

    run: Run
    payload: Packed
    options: RunOptions
    work: Any                     # run.Work: the title, filename and source
    shown: ContinuedView
    attempts: Callable[[ScheduledRun], RunResult]   # launch.py's: start the ranks (again after a lost rank)
    waiting: RunState | None = None           # the run as its view shows it until its ranks start
    recorder: Any = None                      # tracking.RunRecorder: --track, --profile (None: neither)
    listener: Callable[[Inbound], None] | None = None   # a sweep's judge: each of the ranks' reports, as it arrives
    commits: str | None = None   # a sweep member's own commit folder, kept (used when the ranks share this machine)

    def __post_init__(self) -> None:
        self.run.driver = weakref.ref(self)   # while it drives the run: the runs panel reads its view's frame

    def placeholder(self) -> RunState:
        if self.waiting is None:
            self.waiting = RunState(self.options.n, title=self.work.title, options=self.options.summary(),
                                    started_at=self.run.submitted_at, status="queued", run_id=self.run.id,
                                    background=self.run.background)
        return self.waiting

    def show_waiting(self, text: str | None) -> None:
        """What the run waits for, in its view (drawn at once the first time); None: it waits no more."""
        state = self.placeholder()
        state.status, state.now = ("queued" if text else "starting"), time.time()
        state.notes[:] = [text] if text else []
        self.run.waiting_for = text
        self.shown.start(dict(state.snapshot(log_tail=0)))


def slots_pool(run: Run, options: RunOptions) -> Pool:
    """The backend's task slots (none for local processes); read again while the run waits."""
    before_run(options)  # the embedded session starts warming if this run could use it
    backend = backend_for(options)
    launcher = backend.launcher()

    def capacity() -> int | None:
        try:
            return launcher.capacity().slots
        except Exception:
            return None  # the launcher will say what is wrong when the run starts

    where = _PLACES.get(backend.name, f"the {backend.name} backend")
    return Pool(Ticket(run.id, options.n, backend.name, where=where), capacity)


_PLACES = {"spark": "the Spark session", "connect": "the Spark Connect session"}


Pools = Callable[[], Sequence[Pool]]


def drive(d: ScheduledRun, pools: Pools, deadline: float | None) -> RunResult:
    """Wait for the run's turn at ``pools()``, run it, fill in its handle; the result, or raise the run's error.
    Whatever fails on the way (the backend's probe, its slot count, the session gone) ends the run with that error:
    a run never stays queued. The handle says the run ended before its slots go to the next run in line."""
    held: list[Ticket] = []
    try:
        try:
            for pool in pools():
                _take_turn(d, pool, deadline)
                held.append(pool.ticket)
            if d.waiting is not None and d.waiting.status == "queued":
                d.show_waiting(None)  # its turn came: starting
            d.run.running()
            if d.recorder is not None:
                d.recorder.begin()
                d.run.recorded = lambda: _record_end(d)
            result = d.attempts(d)
        except BaseException as exc:
            error = _as_error(exc, d)
            _close_view(d, error)
            details = getattr(error, "result", None)
            d.run.finish(None, details if isinstance(details, RunResult) else None, error)
            if error is exc:
                raise
            raise error from None
        _close_view(d)
        d.run.finish(result.value, result, None)
        return result
    finally:
        for ticket in held:
            turns.release(ticket)


def _record_end(d: ScheduledRun) -> None:
    """The run's last record (tracking never costs a run its end: a failure here is said, not raised)."""
    if d.recorder is None:
        return
    try:
        d.recorder.end()
    except Exception as exc:
        print(f"jupyter-torchdist warning: run {d.run.id} could not be recorded: {type(exc).__name__}: {exc}",
              file=sys.stderr)


def _close_view(d: ScheduledRun, error: BaseException | None = None) -> None:
    """The report replaces the view; a view that breaks (its front end went away) never costs the run its end."""
    try:
        if error is not None:
            _show_end(d, error)
        d.shown.close()
    except Exception:
        pass


def _take_turn(d: ScheduledRun, pool: Pool, deadline: float | None) -> None:
    outcome = turns.wait(pool.ticket, pool.capacity, deadline=deadline, stopped=lambda: d.run.stop_asked is not None,
                         show_waiting=d.show_waiting)
    if outcome == "stopped":
        raise RunInterrupted(f"stopped by {d.run.stop_asked} while queued: no rank had started")
    if outcome == "timeout":
        why = d.placeholder().notes[0] if d.waiting is not None and d.waiting.notes else "queued"
        raise LaunchError(f"-n {d.options.n} did not get its turn within --wait {d.options.wait:g} s ({why}). Wait "
                          "for those runs (run.wait()), stop one (run.stop()), or wait longer (--wait SECONDS).")


def _as_error(exc: BaseException, d: ScheduledRun) -> BaseException:
    """An interrupt while the run waited is the run's RunInterrupted; anything else stands as it is."""
    if isinstance(exc, KeyboardInterrupt):
        where = "while queued for task slots" if d.run.state == "queued" else "before any rank started"
        return RunInterrupted(f"interrupted {where}: nothing ran")
    return exc


def _show_end(d: ScheduledRun, error: BaseException) -> None:
    """A run that never started its ranks but whose view was drawn (it waited): the view says why it ended."""
    if d.waiting is None or d.shown.finished:
        return  # nothing drawn yet, or the run's own last frame was
    state = d.placeholder()
    state.notes.clear()
    state.abort(time.time(), f"{type(error).__name__}: {error}")
    if isinstance(error, RunInterrupted):
        state.status, state.headline = "interrupted", str(error)
    d.shown.finish(dict(state.snapshot()))


# -- in the background ------------------------------------------------------------------------------------------
def background_run(payload: Packed, options: RunOptions, view: RunView, work: Any,
                   attempts: Callable[[ScheduledRun], RunResult],
                   params: Mapping[str, Any] | None = None) -> ScheduledRun:
    """A background run's handle and its first frame, drawn here, in the caller's cell (where a notebook shows it);
    ``start_on_thread`` starts it."""
    options = replace(options, background=True)
    d = ScheduledRun(new_run(work.title, options, params), payload, options, work, ContinuedView(view), attempts)
    d.show_waiting(None)
    return d


def start_on_thread(d: ScheduledRun, on_end: Callable[[Run], None] | None = None, pools: Pools | None = None) -> None:
    """Drive the run on a thread of its own (its later frames update the view from there), after its turn at
    ``pools()`` (default: the backend's task slots), asked for on that thread: a failure there ends the run."""
    taken = pools if pools is not None else (lambda: [slots_pool(d.run, d.options)])
    threading.Thread(target=_in_background, args=(d, taken, on_end), name=f"jupyter-torchdist-run-{d.run.id}",
                     daemon=True).start()


def _in_background(d: ScheduledRun, pools: Pools, on_end: Callable[[Run], None] | None) -> None:
    try:
        drive(d, pools, deadline=None)
    except BaseException:
        pass  # on the handle: result() raises it
    finally:
        if on_end is not None:
            on_end(d.run)
