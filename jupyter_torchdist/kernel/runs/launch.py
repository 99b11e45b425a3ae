"""The one run path: the magic, ``run``, ``TorchDistributor``, the command line and kept ranks come through here.

``execute`` runs one cell on a set of ranks (``rankset.RankSet``: fresh ones for a one-shot run, the kept
ones for ``--keep``), from the first frame of the view to the value or the error with the result on it
(``exc.result``), so logs and state of a failed run stay reachable. ``launch`` packs the work and runs it on
fresh ranks here, ``launch_background`` on a thread of its own (``scheduling.py``: the turn, the handle).
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...core.errors import DistributeError, RunError, RunFailed, RunInterrupted
from ...launchers.limits import check_background
from ...core.options import RunOptions
from ...views import NullView, RunView
from .scheduling import ScheduledRun, background_run, drive, start_on_thread, slots_pool
from ..code_ship import missing_module_hints
from ..pickling import Packed, pack
from .rankset import RankSet
from .result import RunResult
from .restarts import Attempt, CheckpointFolder, ContinuedView, failed_attempt
from .run import Run
from .registry import background_going, last_result, new_run
from .supervisor import plain_sigint
from ...tracking import SweepRecorder, check_environment, recorder_for

__all__ = ["Work", "launch", "launch_background", "prepare_background", "execute", "last_run"]


@dataclass(frozen=True)
class Work:
    """What to run on every rank: a function and its arguments, and where its source lines come from."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    title: str = ""
    filename: str = "<distributed>"
    source: str = ""


def last_run() -> RunResult | None:
    """The result of the run that ended last in this process (state, every rank's logs), failed runs included."""
    return last_result()


def launch(work: Work, options: RunOptions, view: RunView | None = None) -> RunResult:
    """Run ``work`` as ``options.n`` fresh ranks, here, and return the result, or raise the run's error. A run that
    must wait for slots other runs of this kernel hold waits its turn, up to ``--wait``."""
    _check_recording(options)
    payload = pack(work.fn, work.args, work.kwargs, max_bytes=options.max_payload_bytes)
    run = new_run(work.title, options)
    d = ScheduledRun(run, payload, options, work, ContinuedView(view or NullView()), _attempts)
    d.recorder = recorder_for(run, work, options)
    return drive(d, lambda: [slots_pool(run, options)], deadline=time.time() + options.wait)


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
                       params: Mapping[str, Any] | None = None, parent: SweepRecorder | None = None) -> ScheduledRun:
    """A background run's handle and first frame, not started yet (``scheduling.go`` starts it: a sweep's scheduler;
    ``parent``: the sweep's record, when it is tracked)."""
    if parent is None:
        _check_recording(options)
    payload = pack(work.fn, work.args, work.kwargs, max_bytes=options.max_payload_bytes)
    d = background_run(payload, options, view or NullView(), work, _attempts, params)
    d.recorder = recorder_for(d.run, work, options, parent)
    return d


def _check_recording(options: RunOptions) -> None:
    """A tracked or profiled run is refused before anything starts when its trackers or its folder are missing."""
    if options.track or options.profile is not None:
        check_environment(options)


def _attempts(d: ScheduledRun) -> RunResult:
    """Run on fresh ranks; with ``--max-restarts``, again on fresh ranks after a failure from outside the cell's
    code, up to that many times (``restarts``), the ranks resuming from the last ``jt.commit``."""
    options, work = d.options, d.work
    folder: CheckpointFolder | None = None
    failed: list[Attempt] = []
    try:
        while True:
            if d.run.stop_asked is not None:
                raise RunInterrupted(f"stopped by {d.run.stop_asked} before attempt {len(failed) + 1} started")
            ranks = RankSet(options)
            d.run.attach(ranks.inbox)
            d.run.where, d.run.ui_url = ranks.info.label, ranks.info.ui_url   # "spark local[4]", its Spark UI
            if folder is None:
                folder = CheckpointFolder.for_run(options, ranks.info.loopback, kept=d.commits)
            ranks.checkpoint, ranks.attempt, ranks.number = folder.where, len(failed) + 1, d.run.id
            ranks.listener = d.listener
            ranks.carried = [a.line(options.max_restarts + 1) for a in failed]
            if d.recorder is not None:
                ranks.tap, ranks.folder = d.recorder.tap, d.recorder.shown_folder
                ranks.carried += [note] if (note := d.recorder.note()) else []
            started = time.time()
            try:
                result = execute(d.payload, options, ranks, d.shown, filename=work.filename, source=work.source,
                                 title=work.title + (f" (attempt {ranks.attempt})" if failed else ""))
                result.attempts = failed
                return result
            except RunError as exc:
                attempt = (failed_attempt(exc, ranks.attempt, started, folder.latest())
                           if len(failed) < options.max_restarts else None)
                if attempt is None:
                    exc.extra.extend(a.line(options.max_restarts + 1) for a in failed)
                    if isinstance(exc.result, RunResult):
                        exc.result.attempts = failed
                    raise
                attempt.restarted_at = time.time()
                failed.append(attempt)
    finally:
        if folder is not None:
            folder.remove()


def _values(options: RunOptions, values: dict[int, Any]) -> Any:
    return [values.get(r) for r in range(options.n)] if options.all_ranks else values.get(0)


def _check_alive(ranks: RankSet) -> None:
    """Kept ranks lost since the last cell: say so (the set is closed), rather than send a cell nobody runs."""
    lost = ranks.lost_between_cells() if ranks.cells else None
    if lost is not None:
        ranks.close()
        raise RunFailed(f"the kept ranks were lost: {lost.label()} {lost.summary}. Their state is gone; run the cell "
                        "again to start new kept ranks.", {lost.rank: lost}, ranks.options.n)


def execute(payload: Packed, options: RunOptions, ranks: RankSet, view: RunView, *,
            filename: str = "<distributed>", source: str = "", title: str = "") -> RunResult:
    """Run an already packed payload (``pickling.pack``) as the next cell on ``ranks``; the result, or raise."""
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
        ranks.end_cell()
        result.logs = {r.rank: list(r.logs) for r in state.ranks}
        view.finish(dict(state.snapshot(log_tail=view.log_tail)))
    if error is not None:
        error.result = result
        raise error
    result.value = _values(options, sup.values)
    return result
