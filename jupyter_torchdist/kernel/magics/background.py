"""The magic's background side: ``--background`` and ``--sweep`` cells, and ``%distribute_wait``. Only wiring."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError

from ...core.options import RunOptions
from ...views import NullView, make_view
from ..runs.driver import Work, launch_background
from ..runs.run import Run
from ..runs.history import find, last_background
from ..sweeps.sweep import Sweep
from ..sweeps.start import sweep_cell

__all__ = ["run_background", "run_detached", "attach_here", "run_sweep", "wait_for", "stores_output"]


def stores_output(shell: Any, name: str | None) -> Callable[[Any], None]:
    """``-o NAME`` of a cell that runs on: the notebook's NAME is set to the run's value if it succeeds, before
    ``%distribute_wait`` or ``run.wait()`` return."""
    def store(run: Any) -> None:
        if name and run.state == "done":
            shell.user_ns[name] = run.value
    return store


def run_background(shell: Any, work: Work, options: RunOptions) -> Run:
    """Start the run, its view in this cell; the handle is the cell's value. ``-o NAME`` is set when it succeeds."""
    view = make_view(shell, options.quiet, background=True)
    return launch_background(work, options, view, on_outcome=stores_output(shell, options.output))


def run_detached(shell: Any, work: Work, options: RunOptions) -> Any:
    """Hand the run (or the sweep) to a runner of its own (``detached/``); its view in this cell while this kernel
    lives, the handle the cell's value. ``-o NAME`` is set if it succeeds while this kernel still follows it."""
    from ..detached.client import submit, submit_sweep

    if options.sweep:
        return submit_sweep(work, options, _sweep_view(shell, options), as_globals=True)
    view = make_view(shell, options.quiet, background=True)
    run = submit(work, options, view)
    if options.output:
        run.on_outcome.append(stores_output(shell, options.output))
    return run


def attach_here(shell: Any, line: str) -> Any:
    """``%distribute_attach ID``: the detached run's live view in this cell (its report once it has ended)."""
    from ..detached.client import attach

    text = line.strip()
    if not text:
        raise UsageError("%distribute_attach ID: the run's id, as run.id, jupyter_torchdist.runs(detached=True) or "
                         "the runs panel show it")
    try:
        run = attach(text)
    except (ValueError, LookupError) as exc:
        raise UsageError(str(exc)) from None
    run.show(run.new_view(shell))
    return run


def run_sweep(shell: Any, work: Work, options: RunOptions) -> Sweep:
    return sweep_cell(work.fn, options, _sweep_view(shell, options), title=work.title, filename=work.filename,
                      source=work.source)


def _sweep_view(shell: Any, options: RunOptions) -> Any:
    from ...views.compare import SweepView

    return SweepView() if not options.quiet and getattr(shell, "kernel", None) is not None else NullView()


def wait_for(line: str) -> Any:
    """``%distribute_wait [N]``: wait for run N (default: the last background run, or its whole sweep), then its
    value, or its error raised as a foreground cell's would be; a sweep's results table."""
    run = _which(line.strip())
    sweep = getattr(run, "sweep", None)   # a detached run is of no sweep
    target: Any = sweep if sweep is not None and not line.strip() else run
    try:
        target.wait()
    except KeyboardInterrupt:
        print(f"stopped waiting: {target!r} goes on (its .stop() stops it)", flush=True)
        raise
    if isinstance(target, Sweep) or hasattr(target, "results"):   # a sweep, or a detached one
        return target.results()
    return target.result()


def _which(text: str) -> Any:
    if not text:
        run = last_background()
        if run is None:
            raise UsageError("no background run in this kernel yet: %%distribute --background starts one")
        return run
    key: int | str = int(text.lstrip("#")) if text.lstrip("#").isdigit() else text
    run = find(key)
    if run is None and len(text) == 12:
        from ..detached.client import attach

        try:
            return attach(text)   # a detached run's id: this kernel, or one before it, handed it over
        except (ValueError, LookupError):
            pass
    if run is None:
        raise UsageError(f"no run {text} in this kernel: %distribute_wait takes a run's number or id, as "
                         "jupyter_torchdist.runs() lists them (or a detached run's id: runs(detached=True))")
    return run
