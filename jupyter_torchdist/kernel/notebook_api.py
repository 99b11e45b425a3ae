"""The plain Python API under the magic, for code outside notebooks."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core.space import check_space
from ..core.options import RunOptions
from ..core.track_options import AUTO_WINDOW, default_trackers, parse_trackers, parse_window
from ..views import NullView, RunView
from .runs.run import RunResult
from .runs.driver import Work, launch, launch_background
from .sweeps.sweep import Sweep
from .detached.client import DetachedSweep
from .sweeps.start import sweep_function

__all__ = ["run", "run_detailed", "sweep", "spark_session"]


def _recording(track: str | None, experiment: str | None, logdir: str | None,
               profile: bool | str | tuple[int, int] | None) -> dict[str, Any]:
    """``track=``, ``experiment=``, ``logdir=``, ``profile=`` as RunOptions' fields (``track=None``: the default
    tracker, ``%config DistributeMagics.track`` or the environment's; ``profile=True`` or ``"5:10"``)."""
    window: tuple[int, int] | None
    if profile is None or profile is False:
        window = None
    elif profile is True:
        window = AUTO_WINDOW
    elif isinstance(profile, str):
        window = parse_window(profile)
    else:
        window = tuple(profile)  # type: ignore[assignment]
    trackers = default_trackers() if track is None else parse_trackers(track, "track=")
    return {"track": trackers, "experiment": experiment, "logdir": logdir, "profile": window}


def _code(workdir: str | None, pip: str | Sequence[str], requirements: str | None) -> dict[str, Any]:
    """``workdir=``, ``pip=`` (one requirement or several), ``requirements=`` as RunOptions' fields."""
    return {"workdir": workdir, "pip": (pip,) if isinstance(pip, str) else tuple(pip), "requirements": requirements}


def run_detailed(fn: Callable[..., Any], *args: Any, n: int = 2, gpu: bool = False, local: bool = False,
                 timeout: float | None = None, all_ranks: bool = False, data_workers: int | None = None,
                 max_restarts: int = 0, checkpoint_dir: str | None = None, view: RunView | None = None,
                 track: str | None = None, experiment: str | None = None, logdir: str | None = None,
                 profile: bool | str | tuple[int, int] | None = None, workdir: str | None = None,
                 pip: str | Sequence[str] = (), requirements: str | None = None, **kwargs: Any) -> RunResult:
    """Like ``run`` but returns the whole ``RunResult`` (every rank's value, state, logs, failed attempts)."""
    options = RunOptions(n=n, gpu=gpu, local=local, timeout=timeout, all_ranks=all_ranks, data_workers=data_workers,
                         max_restarts=max_restarts, checkpoint_dir=checkpoint_dir,
                         **_recording(track, experiment, logdir, profile), **_code(workdir, pip, requirements))
    work = Work(fn, args, kwargs, title=f"run({getattr(fn, '__name__', 'fn')}) -n {n}")
    return launch(work, options, view)


def run(fn: Callable[..., Any], *args: Any, n: int = 2, gpu: bool = False, local: bool = False,
        timeout: float | None = None, all_ranks: bool = False, data_workers: int | None = None,
        max_restarts: int = 0, checkpoint_dir: str | None = None, background: bool = False, detach: bool = False,
        track: str | None = None, experiment: str | None = None, logdir: str | None = None,
        profile: bool | str | tuple[int, int] | None = None, workdir: str | None = None,
        pip: str | Sequence[str] = (), requirements: str | None = None, **kwargs: Any) -> Any:
    """Call ``fn(*args, **kwargs)`` on ``n`` ranks (process group ready) and return rank 0's value.

    With ``all_ranks=True`` the list of every rank's value comes back instead. A Spark DataFrame among the
    arguments reaches the ranks as a handle for ``jupyter_torchdist.batches``; ``data_workers`` Spark tasks
    prepare its batches (default: the session's task slots beyond the ranks'). ``max_restarts`` and
    ``checkpoint_dir`` are ``--max-restarts`` and ``--checkpoint-dir`` (``jupyter_torchdist.commit``/``restore``).
    With ``background=True`` a ``Run`` handle comes back at once (``.result()`` gives the value later); with
    ``detach=True`` a ``DetachedRun`` handle, and the run goes on when this kernel ends (``attach(run.id)`` later).
    ``track`` (a tracker's name, several with commas, or "none": ``core/trackers.py`` lists them), ``experiment``,
    ``logdir`` and ``profile`` (True, or "START:STOP") are ``--track``, ``--experiment``, ``--logdir`` and
    ``--profile``;
    ``workdir`` (a folder, or "none"), ``pip`` (a requirement, or a list) and ``requirements`` (a file) are
    ``--workdir``, ``--pip`` and ``--requirements``.
    """
    if background or detach:
        options = RunOptions(n=n, gpu=gpu, local=local, timeout=timeout, all_ranks=all_ranks,
                             data_workers=data_workers, max_restarts=max_restarts, checkpoint_dir=checkpoint_dir,
                             background=True, detach=detach, **_recording(track, experiment, logdir, profile),
                             **_code(workdir, pip, requirements))
        work = Work(fn, args, kwargs, title=f"run({getattr(fn, '__name__', 'fn')}) -n {n}")
        if detach:
            from .detached.client import submit

            return submit(work, options)
        return launch_background(work, options)
    return run_detailed(fn, *args, n=n, gpu=gpu, local=local, timeout=timeout, all_ranks=all_ranks,
                        data_workers=data_workers, max_restarts=max_restarts, checkpoint_dir=checkpoint_dir,
                        track=track, experiment=experiment, logdir=logdir, profile=profile, workdir=workdir, pip=pip,
                        requirements=requirements, **kwargs).value


def sweep(fn: Callable[..., Any], space: Mapping[str, Any], *args: Any, n: int = 2, gpu: bool = False,
          local: bool = False, timeout: float | None = None, all_ranks: bool = False, concurrent: int | None = None,
          max_restarts: int = 0, checkpoint_dir: str | None = None, trials: int | None = None,
          search: str | None = None, seed: int | None = None, metric: str = "loss", mode: str = "min",
          early_stop: str = "none", grace: int = 1, reduction_factor: int | None = None, max_steps: int | None = None,
          metric_reduce: str | None = None, study: str | None = None,
          track: str | None = None, experiment: str | None = None, logdir: str | None = None,
          profile: bool | str | tuple[int, int] | None = None, workdir: str | None = None,
          pip: str | Sequence[str] = (), requirements: str | None = None, detach: bool = False,
          **kwargs: Any) -> Sweep | DetachedSweep:
    """Call ``fn(*args, **kwargs, **params)`` on ``n`` ranks once per member of ``space``, as background runs,
    ``concurrent`` at once (default: as many as the task slots hold). Returns the sweep's handle at once:
    ``wait()``, ``results()``, ``best()``, ``stop()``, ``runs``.

    ``space`` maps names to lists (a grid: every combination) or distributions (``loguniform``, ``uniform``,
    ``intrange``, ``choice``: ``trials`` members drawn by ``search``, "random" or "optuna"). ``metric``/``mode`` name
    what the ranks report with ``report(...)`` that judges the members; ``early_stop`` ("asha", "median") stops the
    worse ones from step ``grace`` on (ASHA's rungs ``reduction_factor`` apart, default 4; ``max_steps``: the steps a
    member runs, where no rule judges); ``study`` (a SQLite file) makes the search resumable. These keywords are the
    sweep's own: to hand ``fn`` an argument of one of these names, bind it first (``functools.partial``).
    ``track``/``experiment``/``logdir``/``profile`` record it as ``run`` does: a parent record, a child per member;
    ``workdir``/``pip``/``requirements`` are ``run``'s. With ``detach=True`` a ``DetachedSweep`` comes back instead:
    the sweep goes on when this kernel ends (``attach(sweep.id)`` later).
    """
    options = RunOptions(n=n, gpu=gpu, local=local, timeout=timeout, all_ranks=all_ranks, concurrent=concurrent,
                         max_restarts=max_restarts, checkpoint_dir=checkpoint_dir, sweep=check_space(space),
                         background=True, trials=trials, search=search, seed=seed, metric=metric, mode=mode,
                         early_stop=early_stop, grace=grace, reduction_factor=reduction_factor, max_steps=max_steps,
                         metric_reduce=metric_reduce, study=study, detach=detach,
                         **_recording(track, experiment, logdir, profile), **_code(workdir, pip, requirements))
    if detach:
        from .detached.client import submit_sweep

        return submit_sweep(Work(fn, args, kwargs, title=f"sweep({getattr(fn, '__name__', 'fn')}) -n {n}"), options,
                            as_globals=False)
    return sweep_function(fn, options, args, kwargs, NullView())


def spark_session() -> Any:
    """The SparkSession runs use: the notebook's active one, or the embedded local one (started if need be,
    after ``%load_ext``'s warm-up). Build the DataFrames you train on with it; it is the active session."""
    from ..launchers.session import autostart
    from ..launchers.session.embedded import get_session, wait_for_warm_up

    wait_for_warm_up()
    session, is_embedded = get_session()
    if is_embedded:
        autostart.wanted()  # its Python workers warm up in the background
    return session
