"""A run's life, in one place: every run comes through here (the magic, ``run``, ``sweep``, ``TorchDistributor``,
the command line, background runs, kept cells).

``RunDriver.life`` reads top to bottom: take a turn in each pool the run needs (a sweep's places, the backend's task
slots, kept ranks' one cell at a time), then for each attempt start the ranks, supervise them to the end of the cell,
and restart (a rank lost, ``--max-restarts``) or conclude. What a run needs is handed to its driver when it is made
(the handle, the packed payload, the options, its view, its recorder and a sweep's listener); the ranks get theirs at
construction too (``rankset.Hooks``). The backend is chosen and its launcher made once per run (``launcher_for``),
and the same launcher serves its turn (its slots) and every attempt.

``launch`` drives in the caller's thread; ``launch_background`` draws the first frame in the caller's cell, returns
the handle and drives on a thread of its own. ``execute`` is one cell on a set of ranks (fresh, or kept).
"""
from __future__ import annotations

import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ...core.contract import Inbound
from ...core.errors import DistributeError, LaunchError, RunError, RunFailed, RunInterrupted
from ...core.options import RunOptions
from ...launchers import launcher_for
from ...launchers.base import Launcher
from ...launchers.limits import check_background
from ...tracking import SweepRecorder, check_environment, recorder_for
from ...views import NullView, RunView
from ..code_ship import missing_module_hints
from ..pickling import Packed, pack
from ..state.run import RunState
from .rankset import Hooks, RankSet
from .history import background_going, last_result, new_run
from .restarts import Attempt, CheckpointFolder, ContinuedView, failed_attempt
from .run import RunResult
from .run import Run
from .supervisor import plain_sigint
from .turns import Ticket, turns

__all__ = ["Work", "Pool", "Pools", "RunDriver", "launch", "launch_background", "prepare_background",
           "start_on_thread", "execute", "last_run"]


@dataclass(frozen=True)
class Work:
    """What to run on every rank: a function and its arguments, and where its source lines come from."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    title: str = ""
    filename: str = "<distributed>"
    source: str = ""
    ships: frozenset[str] = frozenset()  # modules it needs that pickling it does not see (a packed cell it carries)


@dataclass(frozen=True)
class Pool:
    """A pool the run takes a place in before it starts, and how many places the pool has (None: no limit)."""

    ticket: Ticket
    capacity: Callable[[], int | None]


Pools = Callable[[], Sequence[Pool]]

_PLACES = {"spark": "the Spark session", "connect": "the Spark Connect session"}


class RunDriver:
    """One run as it is driven: its handle, what it runs, its one view (``ContinuedView``, from the queued frame to
    the report) and its hooks. ``pools``: what the run waits its turn at (default: its backend's task slots)."""

    def __init__(self, run: Run, payload: Packed, options: RunOptions, work: Work, view: RunView, *,
                 recorder: Any = None, listener: Callable[[Inbound], None] | None = None,
                 commits: str | None = None, pools: Pools | None = None) -> None:
        self.run, self.payload, self.options, self.work = run, payload, options, work
        self.shown = view if isinstance(view, ContinuedView) else ContinuedView(view)
        self.recorder = recorder   # tracking.RunRecorder: --track, --profile (None: neither)
        self.listener = listener   # a sweep's judge: each of the ranks' reports, as it arrives
        self.commits = commits     # a sweep member's own commit folder, kept (used when the ranks share this machine)
        self.pools: Pools = pools if pools is not None else self._slots
        self.waiting: RunState | None = None  # the run as its view shows it until its ranks start
        self.launcher: Launcher | None = None
        self.folder: CheckpointFolder | None = None
        self.arrived: list[Pool] | None = None  # its pools, its place in the first one taken at submission (arrive)
        run.driver = weakref.ref(self)  # while it drives the run: the runs panel reads its view's frame

    # -- the life of a run --------------------------------------------------------------------------------------------
    def life(self, deadline: float | None) -> RunResult:
        """Wait for the run's turn, run it (again after a lost rank, with ``--max-restarts``), fill in its handle;
        the result, or raise the run's error. Whatever fails on the way (the backend's probe, its slot count, the
        session gone) ends the run with that error: a run never stays queued. The handle says the run ended before
        its places go to the next run in line."""
        held: list[Ticket] = []
        pools = self.arrived
        try:
            for pool in pools if pools is not None else self.pools():
                self._take_turn(pool, deadline)
                held.append(pool.ticket)
            self._begin()
            failed: list[Attempt] = []
            while True:
                ranks = self.start_ranks(failed)
                started = time.time()
                try:
                    result = self.supervise(ranks, failed)
                except RunError as exc:
                    if self.restart(exc, ranks, failed, started):
                        continue
                    raise
                return self._conclude(result)
        except BaseException as exc:
            error = self._fail(exc)
            if error is exc:
                raise
            raise error from None
        finally:
            for ticket in held:
                turns.release(ticket)
            if pools:
                turns.leave(pools[0].ticket)  # it ended before it asked for its turn (a no-op once it did)
            if self.folder is not None:
                self.folder.remove()

    def arrive(self) -> None:
        """Take the run's place in line now, in the submitting thread: a background run asks for its turn on a thread
        of its own, and a cell submitted after it must not get there first (kept cells build on each other's state).
        Only the first pool: a place in a later one is taken once the run holds the first."""
        self.arrived = list(self.pools())
        if self.arrived:
            turns.join(self.arrived[0].ticket)

    # -- its steps -----------------------------------------------------------------------------------------------------
    def _slots(self) -> list[Pool]:
        """The backend's task slots (none for local processes), read again while the run waits. The backend is
        chosen here, once; its launcher starts every attempt."""
        launcher = self._launcher()

        def capacity() -> int | None:
            try:
                return launcher.capacity().slots
            except Exception:
                return None  # the launcher will say what is wrong when the run starts

        where = _PLACES.get(launcher.name, f"the {launcher.name} backend")
        return [Pool(Ticket(self.run.number, self.options.n, launcher.name, where=where), capacity)]

    def _launcher(self) -> Launcher:
        if self.launcher is None:
            self.launcher = launcher_for(self.options)
        return self.launcher

    def _take_turn(self, pool: Pool, deadline: float | None) -> None:
        outcome = turns.wait(pool.ticket, pool.capacity, deadline=deadline,
                             stopped=lambda: self.run.stop_asked is not None, show_waiting=self.show_waiting)
        if outcome == "stopped":
            raise RunInterrupted(f"stopped by {self.run.stop_asked} while queued: no rank had started")
        if outcome == "timeout":
            why = self.placeholder().notes[0] if self.waiting is not None and self.waiting.notes else "queued"
            raise LaunchError(f"-n {self.options.n} did not get its turn within --wait {self.options.wait:g} s ({why})."
                              " Wait for those runs (run.wait()), stop one (run.stop()), or wait longer (--wait "
                              "SECONDS).")

    def _begin(self) -> None:
        if self.waiting is not None and self.waiting.status == "queued":
            self.show_waiting(None)  # its turn came: starting
        self.run.running()
        if self.recorder is not None:
            self.recorder.begin()
            self.run.recorded = self._record_end

    def start_ranks(self, failed: list[Attempt]) -> RankSet:
        """Fresh ranks for the next attempt, prepared by the run's launcher, with the run's hooks."""
        if self.run.stop_asked is not None:
            raise RunInterrupted(f"stopped by {self.run.stop_asked} before attempt {len(failed) + 1} started")
        launcher = self._launcher()
        info = launcher.prepare(self.options)
        if self.folder is None:
            self.folder = CheckpointFolder.for_run(self.options, info.loopback, kept=self.commits)
        carried = tuple(a.line(self.options.max_restarts + 1) for a in failed)
        recorder = self.recorder
        if recorder is not None and (note := recorder.note()):
            carried += (note,)
        hooks = Hooks(checkpoint=self.folder.where, attempt=len(failed) + 1, number=self.run.number,
                      durable_id=self.run.id, carried=carried,
                      tap=recorder.tap if recorder is not None else None, listener=self.listener,
                      folder=recorder.shown_folder if recorder is not None else None)
        ranks = RankSet(self.options, launcher, info, hooks)
        self.run.attach(ranks.inbox)
        self.run.where, self.run.ui_url = info.label, info.ui_url   # "spark local[4]", its Spark UI
        return ranks

    def supervise(self, ranks: RankSet, failed: list[Attempt]) -> RunResult:
        """The cell on these ranks, from the first frame of the view to the value (or the run's error)."""
        title = self.work.title + (f" (attempt {len(failed) + 1})" if failed else "")
        result = execute(self.payload, self.options, ranks, self.shown, filename=self.work.filename,
                         source=self.work.source, title=title)
        result.attempts = failed
        return result

    def restart(self, exc: RunError, ranks: RankSet, failed: list[Attempt], started: float) -> bool:
        """Whether the run starts again after this failure (one from outside the cell's code, restarts left);
        if not, the failure carries the attempts before it."""
        assert self.folder is not None
        attempt = (failed_attempt(exc, len(failed) + 1, started, self.folder.latest())
                   if len(failed) < self.options.max_restarts else None)
        if attempt is None:
            exc.extra.extend(a.line(self.options.max_restarts + 1) for a in failed)
            if isinstance(exc.result, RunResult):
                exc.result.attempts = failed
            return False
        attempt.restarted_at = time.time()
        failed.append(attempt)
        return True

    def _conclude(self, result: RunResult) -> RunResult:
        self._close_view()
        self.run.finish(result.value, result, None)
        return result

    def _fail(self, exc: BaseException) -> BaseException:
        """The run ends with this error (an interrupt while it waited is its RunInterrupted), its view says so."""
        error = exc
        if isinstance(exc, KeyboardInterrupt):
            where = "while queued for task slots" if self.run.state == "queued" else "before any rank started"
            error = RunInterrupted(f"interrupted {where}: nothing ran")
        self._close_view(error)
        details = getattr(error, "result", None)
        self.run.finish(None, details if isinstance(details, RunResult) else None, error)
        return error

    # -- its view while it waits, and at its end -----------------------------------------------------------------------
    def placeholder(self) -> RunState:
        if self.waiting is None:
            self.waiting = RunState(self.options.n, title=self.work.title, options=self.options.summary(),
                                    started_at=self.run.submitted_at, status="queued", run_id=self.run.number,
                                    durable_id=self.run.id, background=self.run.background)
        return self.waiting

    def show_waiting(self, text: str | None) -> None:
        """What the run waits for, in its view (drawn at once the first time); None: it waits no more."""
        state = self.placeholder()
        state.status, state.now = ("queued" if text else "starting"), time.time()
        state.notes[:] = [text] if text else []
        self.run.waiting_for = text
        self.shown.start(dict(state.snapshot(log_tail=0)))

    def _close_view(self, error: BaseException | None = None) -> None:
        """The report replaces the view; a view that breaks (its front end went away) never costs the run its end."""
        try:
            if error is not None and self.waiting is not None and not self.shown.finished:
                self._show_end(error)  # a run that never started its ranks, whose view was drawn (it waited)
            self.shown.close()
        except Exception:
            pass

    def _show_end(self, error: BaseException) -> None:
        state = self.placeholder()
        state.notes.clear()
        state.abort(time.time(), f"{type(error).__name__}: {error}")
        if isinstance(error, RunInterrupted):
            state.status, state.headline = "interrupted", str(error)
        self.shown.finish(dict(state.snapshot()))

    def _record_end(self) -> None:
        """The run's last record (tracking never costs a run its end: a failure here is said, not raised)."""
        if self.recorder is None:
            return
        try:
            self.recorder.end()
        except Exception as exc:
            print(f"jupyter-torchdist warning: run {self.run.number} could not be recorded: "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr)


# -- starting runs -----------------------------------------------------------------------------------------------------
def last_run() -> RunResult | None:
    """The result of the run that ended last in this process (state, every rank's logs), failed runs included."""
    return last_result()


def launch(work: Work, options: RunOptions, view: RunView | None = None) -> RunResult:
    """Run ``work`` as ``options.n`` fresh ranks, here, and return the result, or raise the run's error. A run that
    must wait for slots other runs of this kernel hold waits its turn, up to ``--wait``."""
    _check_recording(options)
    payload = pack(work.fn, work.args, work.kwargs, max_bytes=options.max_payload_bytes)
    run = new_run(work.title, options)
    d = RunDriver(run, payload, options, work, view or NullView(), recorder=recorder_for(run, work, options))
    return d.life(deadline=time.time() + options.wait)


def launch_background(work: Work, options: RunOptions, view: RunView | None = None, *,
                      on_outcome: Callable[[Run], None] | None = None) -> Run:
    """Start ``work`` on fresh ranks and return its handle at once (``Run``); the run goes on on a thread of its own,
    waiting its turn for slots first. ``on_outcome`` is called with the handle once its outcome is set, before anyone
    waiting on it wakes."""
    check_background(background_going())
    d = prepare_background(work, options, view)
    if on_outcome is not None:
        d.run.on_outcome.append(on_outcome)
    start_on_thread(d)
    return d.run


def prepare_background(work: Work, options: RunOptions, view: RunView | None = None,
                       params: Mapping[str, Any] | None = None, parent: SweepRecorder | None = None, *,
                       commits: str | None = None) -> RunDriver:
    """A background run's handle and its first frame, drawn here, in the caller's cell (where a notebook shows it);
    not started yet (``start_on_thread``: here, or a sweep's scheduler). ``parent``: the sweep's record, when it is
    tracked; ``commits``: a sweep member's own commit folder."""
    if parent is None:
        _check_recording(options)
    payload = pack(work.fn, work.args, work.kwargs, max_bytes=options.max_payload_bytes)
    if work.ships:
        payload = Packed(payload.data, payload.modules | work.ships)
    options = replace(options, background=True)
    run = new_run(work.title, options, params)
    d = RunDriver(run, payload, options, work, view or NullView(), recorder=recorder_for(run, work, options, parent),
                  commits=commits)
    d.show_waiting(None)
    return d


def start_on_thread(d: RunDriver, on_end: Callable[[Run], None] | None = None) -> None:
    """Drive the run on a thread of its own (its later frames update the view from there); its turn is asked for on
    that thread: a failure there ends the run."""
    threading.Thread(target=_in_background, args=(d, on_end), name=f"jupyter-torchdist-run-{d.run.number}",
                     daemon=True).start()


def _in_background(d: RunDriver, on_end: Callable[[Run], None] | None) -> None:
    try:
        d.life(deadline=None)
    except BaseException:
        pass  # on the handle: result() raises it
    finally:
        if on_end is not None:
            on_end(d.run)


def _check_recording(options: RunOptions) -> None:
    """A tracked or profiled run is refused before anything starts when its trackers or its folder are missing."""
    if options.track or options.profile is not None:
        check_environment(options)


# -- one cell on a set of ranks ----------------------------------------------------------------------------------------
def execute(payload: Packed, options: RunOptions, ranks: RankSet, view: RunView, *,
            filename: str = "<distributed>", source: str = "", title: str = "") -> RunResult:
    """Run an already packed payload (``pickling.pack``) as the next cell on ``ranks``; the result, or raise (the
    error carries the result: the state and every rank's logs of a failed cell stay reachable)."""
    _check_alive(ranks)
    state = ranks.new_state(options, title)
    for warning in ranks.info.warnings if ranks.cells == 0 else ():
        if options.background:  # printed from its thread, it would land in whichever cell runs now
            state.notes.append(f"warning: {warning}")
        else:
            print(f"jupyter-torchdist warning: {warning}", file=sys.stderr)
    sup = ranks.supervisor(state, view, options)
    result = RunResult(value=None, values=sup.values, state=state)
    try:
        view.start(dict(state.snapshot(log_tail=view.log_tail)))
        ranks.begin(payload, options, filename, source)
        with plain_sigint():
            sup.run_until_done()
        ranks.after_cell(state, sup)
        error = sup.conclude(options)
        if error is not None:
            error.extra.extend(missing_module_hints((f.summary for f in state.failures.values()), ranks.code))
    except BaseException as exc:  # the launcher broke, or an interrupt came before the loop began
        ranks.close(wait_s=10.0 if ranks.keep else 0.0)
        state.abort(time.time(), f"{type(exc).__name__}: {exc}")
        if isinstance(exc, DistributeError):
            exc.result = result
        raise
    finally:
        sup.data.close()
        ranks.end_cell(job_ended=state.job_ended_at is not None)
        result.logs = {r.rank: list(r.logs) for r in state.ranks}
        view.finish(dict(state.snapshot(log_tail=view.log_tail)))
    if error is not None:
        error.result = result
        raise error
    result.value = [sup.values.get(r) for r in range(options.n)] if options.all_ranks else sup.values.get(0)
    return result


def _check_alive(ranks: RankSet) -> None:
    """Kept ranks lost since the last cell: say so (the set is closed), rather than send a cell nobody runs."""
    lost = ranks.lost_between_cells() if ranks.cells else None
    if lost is not None:
        ranks.close()
        raise RunFailed(f"the kept ranks were lost: {lost.label()} {lost.summary}. Their state is gone; run the cell "
                        "again to start new kept ranks.", {lost.rank: lost}, ranks.options.n)
