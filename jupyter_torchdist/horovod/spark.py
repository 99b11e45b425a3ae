"""``horovod.spark.run`` on our Spark launcher: ``import horovod.spark`` becomes
``import jupyter_torchdist.horovod.spark`` (or ``from jupyter_torchdist.horovod import spark``).

``run(fn, args, kwargs, num_proc)`` calls ``fn`` on ``num_proc`` ranks, one Spark barrier task each, on the active
SparkSession (or the embedded local one), and returns every rank's return value in rank order. It goes through
the same run path as ``%%distribute --all-ranks`` and ``jupyter_torchdist.run(..., all_ranks=True)``: the live
view, the error naming the rank that failed first (``RunFailed``), no process left behind. The process group is
up before ``fn`` starts, so ``hvd.init()`` inside it adopts the group.

Horovod's arguments, here:

- ``num_proc``: the number of ranks. ``None`` means Spark's default parallelism (``spark.default.parallelism``,
  ``sparkContext.defaultParallelism``), as in Horovod; more ranks than the session has task slots is refused at
  once with a ``LaunchError`` (barrier tasks must all run together).
- ``env``: environment variables set in each rank's process before ``fn`` is called, on top of the executor's
  environment (Horovod's ``env=None`` copies the driver's whole environment to the ranks; here ``None`` leaves the
  executor's as it is). The process group is already up by then: what it reads (``GLOO_SOCKET_IFNAME``) belongs in
  the session's ``spark.executorEnv.*`` conf.
- ``verbose``: 0 shows nothing while it runs; otherwise the run is shown live as every run is (a widget in a
  notebook, text in a terminal). ``stdout``/``stderr``: a stream to print the ranks' output to, as text, instead.
- ``start_timeout`` and ``prefix_output_with_timestamp`` are accepted and change nothing: a run that cannot get its
  task slots is refused at once rather than waited for, and the output is kept per rank.
- ``use_mpi=True``, ``use_gloo=False``, ``extra_mpi_args``, ``nics`` and ``executable`` raise
  ``HorovodUnsupportedError`` at once, saying what to set instead.

``run_elastic(fn, args, kwargs, num_proc, min_num_proc, max_num_proc, ..., reset_limit)`` is ``run`` whose ranks
are started again, all of them, when one is lost (its executor or host gone, its process killed): ``fn`` written
with ``hvd.elastic.run`` and ``state.commit()`` resumes from the last commit. The number of ranks stays
``num_proc`` (default ``min_num_proc``, else Spark's default parallelism): where Horovod would go on with fewer
ranks or add more, the restart waits for ``num_proc`` task slots. ``reset_limit`` is the number of restarts
(``--max-restarts``; default 3, where Horovod's default is no limit); ``checkpoint_dir=`` (ours) says where commits
go on a cluster, a folder every executor can reach (``--checkpoint-dir``). ``elastic_timeout`` is accepted and
changes nothing.

Importing this module does not import pyspark; ``run`` does, when it starts the ranks.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from .errors import HorovodUnsupportedError

__all__ = ["run", "run_elastic"]

# Set by the launcher on every rank: a value from env= would contradict the process group that is already up.
_LAUNCHER_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_MPI = "MPI is not used here: the ranks talk over torch.distributed (gloo on the CPU, NCCL for CUDA tensors)"


class _WithEnv:
    """``fn`` with environment variables set in the rank's process first (``env=``); pickled by reference."""

    def __init__(self, fn: Callable[..., Any], env: dict[str, str]) -> None:
        self.fn, self.env = fn, env
        self.__name__ = getattr(fn, "__name__", "fn")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        os.environ.update(self.env)
        return self.fn(*args, **kwargs)


def _refuse_unsupported(use_mpi: bool | None, use_gloo: bool | None, extra_mpi_args: str | None, nics: Any,
                        executable: str | None) -> None:
    """The arguments that would change what runs: a HorovodUnsupportedError at once, saying what to do instead."""
    refusals = [
        (use_mpi, f"use_mpi=True: {_MPI}. Drop use_mpi"),
        (use_gloo is False, f"use_gloo=False asks for MPI: {_MPI}. Drop use_gloo"),
        (extra_mpi_args, f"extra_mpi_args: {_MPI}. Drop it; torch settings go in env= or the SparkSession's conf"),
        (nics, "nics: the ranks' network interface is the executors' setting here. Set "
               "spark.executorEnv.GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME) on the SparkSession; env= is applied "
               "after the process group is up, too late for it"),
        (executable, "executable: the ranks run the executors' Python. Set spark.pyspark.python on the SparkSession"),
    ]
    for given, message in refusals:
        if given:
            raise HorovodUnsupportedError(f"horovod.spark.run({message}).")


def _checked_env(env: Mapping[str, str] | None) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise TypeError("env must be a dict of environment variable names to string values, e.g. {'SEED': '1'}")
    clash = sorted(set(env) & set(_LAUNCHER_ENV))
    if clash:
        raise ValueError(f"env sets {', '.join(clash)}, which the launcher sets on every rank for the process group "
                         "that is already up; leave them out (num_proc sets the world size)")
    return dict(env)


def _default_num_proc() -> int:
    """Spark's default parallelism, as Horovod takes it; a clear error when the session has fewer task slots."""
    from ..core.errors import LaunchError
    from ..core.options import RunOptions
    from ..launchers import launcher_for

    capacity = launcher_for(RunOptions(n=1, all_ranks=True, spark_tasks=True)).capacity()
    parallelism, slots = capacity.default_ranks, capacity.slots
    if slots is not None and parallelism > slots:
        raise LaunchError(f"num_proc=None means Spark's default parallelism, {parallelism} here, but "
                          f"{capacity.where} runs {slots} tasks at once: pass num_proc=N with N <= {slots}.")
    return parallelism


def _view(verbose: int, stdout: TextIO | None, stderr: TextIO | None) -> Any:
    """The view every run gets (live in a notebook, text in a terminal); text into ``stdout``/``stderr`` if given."""
    from ..views import make_view

    if verbose and (stdout is not None or stderr is not None):
        from ..views.text import TextView

        return TextView(out=stdout if stdout is not None else stderr)
    try:
        from IPython import get_ipython
    except ImportError:
        return make_view(None, quiet=not verbose)
    return make_view(get_ipython(), quiet=not verbose)


def run(fn: Callable[..., Any], args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None,
        num_proc: int | None = None, start_timeout: float | None = None, use_mpi: bool | None = None,
        use_gloo: bool | None = None, extra_mpi_args: str | None = None, env: Mapping[str, str] | None = None,
        stdout: TextIO | None = None, stderr: TextIO | None = None, verbose: int = 1, nics: Any = None,
        prefix_output_with_timestamp: bool = False, executable: str | None = None) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` on ``num_proc`` ranks as Spark barrier tasks; every rank's value, in rank order.

    ``num_proc=None`` means Spark's default parallelism (``sparkContext.defaultParallelism``), as in Horovod.
    ``env`` is set in each rank's process before ``fn`` runs; ``verbose=0`` shows nothing while it runs;
    ``stdout``/``stderr`` take the ranks' output as text. The module docstring says what each argument does here.
    A rank that raises fails the call with ``RunFailed`` naming that rank; the other ranks are stopped.
    """
    _refuse_unsupported(use_mpi, use_gloo, extra_mpi_args, nics, executable)
    _check_num_proc("num_proc", num_proc)
    return _launch("run", fn, args, kwargs, num_proc, env, _view(verbose, stdout, stderr))


def run_elastic(fn: Callable[..., Any], args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None,
                num_proc: int | None = None, min_num_proc: int | None = None, max_num_proc: int | None = None,
                start_timeout: float | None = None, elastic_timeout: float | None = None,
                reset_limit: int | None = None, env: Mapping[str, str] | None = None, stdout: TextIO | None = None,
                stderr: TextIO | None = None, verbose: int = 1, nics: Any = None,
                prefix_output_with_timestamp: bool = False, min_np: int | None = None, max_np: int | None = None,
                checkpoint_dir: str | None = None) -> list[Any]:
    """``run`` whose ranks all start again from the last ``state.commit()`` when one is lost, at most
    ``reset_limit`` times (default 3), on ``num_proc`` ranks each time (the module docstring says how this differs
    from Horovod's shrinking and growing). Every rank's value of the attempt that finished, in rank order."""
    _refuse_unsupported(None, None, None, nics, None)
    low = min_num_proc if min_num_proc is not None else min_np
    high = max_num_proc if max_num_proc is not None else max_np
    for label, value in (("num_proc", num_proc), ("min_num_proc", low), ("max_num_proc", high)):
        _check_num_proc(label, value)
    n = num_proc if num_proc is not None else low
    if n is not None and ((low is not None and n < low) or (high is not None and n > high)):
        raise ValueError(f"num_proc={n} is outside min_num_proc={low} .. max_num_proc={high}")
    if low is not None and high is not None and low > high:
        raise ValueError(f"min_num_proc={low} is more than max_num_proc={high}")
    restarts = 3 if reset_limit is None else reset_limit
    if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0:
        raise ValueError(f"reset_limit must be a whole number of restarts >= 0, got {reset_limit!r}")
    return _launch("run_elastic", fn, args, kwargs, n, env, _view(verbose, stdout, stderr),
                   max_restarts=restarts, checkpoint_dir=checkpoint_dir)


def _check_num_proc(label: str, value: Any) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ValueError(f"{label} must be a whole number of ranks >= 1 (or None for Spark's default "
                         f"parallelism), got {value!r}")


def _launch(entry: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None,
            num_proc: int | None, env: Mapping[str, str] | None, view: Any, **more: Any) -> list[Any]:
    """``fn`` on ``num_proc`` Spark barrier tasks through the run path every run takes; every rank's value."""
    if not callable(fn):
        raise TypeError(f"fn must be a function to run on every rank, not {type(fn).__name__}")
    extra_env = _checked_env(env)
    from ..core.options import RunOptions
    from ..kernel.runs.driver import Work, launch

    n = _default_num_proc() if num_proc is None else num_proc
    options = RunOptions(n=n, all_ranks=True, spark_tasks=True, **more)
    target = _WithEnv(fn, extra_env) if extra_env else fn
    name = getattr(fn, "__name__", "fn")
    work = Work(target, tuple(args), dict(kwargs or {}), title=f"horovod.spark.{entry}({name}) on {n}")
    return list(launch(work, options, view).value)


def __getattr__(name: str) -> Any:
    """Horovod's other Spark entry points (the estimators): what to use instead."""
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    raise HorovodUnsupportedError(
        f"horovod.spark.{name} is not provided by jupyter_torchdist.horovod.spark: only run() is (the Spark "
        "estimators are not; train inside run() or a %%distribute cell).")
