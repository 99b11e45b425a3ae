"""The plain Python API under the magic, for code outside notebooks."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..options import RunOptions
from ..views import RunView
from .result import RunResult
from .run import Work, launch

__all__ = ["run", "run_detailed", "spark_session"]


def run_detailed(fn: Callable[..., Any], *args: Any, n: int = 2, gpu: bool = False, local: bool = False,
                 timeout: float | None = None, all_ranks: bool = False, data_workers: int | None = None,
                 max_restarts: int = 0, checkpoint_dir: str | None = None, view: RunView | None = None,
                 **kwargs: Any) -> RunResult:
    """Like ``run`` but returns the whole ``RunResult`` (every rank's value, state, logs, failed attempts)."""
    options = RunOptions(n=n, gpu=gpu, local=local, timeout=timeout, all_ranks=all_ranks, data_workers=data_workers,
                         max_restarts=max_restarts, checkpoint_dir=checkpoint_dir)
    work = Work(fn, args, kwargs, title=f"run({getattr(fn, '__name__', 'fn')}) -n {n}")
    return launch(work, options, view)


def run(fn: Callable[..., Any], *args: Any, n: int = 2, gpu: bool = False, local: bool = False,
        timeout: float | None = None, all_ranks: bool = False, data_workers: int | None = None,
        max_restarts: int = 0, checkpoint_dir: str | None = None, **kwargs: Any) -> Any:
    """Call ``fn(*args, **kwargs)`` on ``n`` ranks (process group ready) and return rank 0's value.

    With ``all_ranks=True`` the list of every rank's value comes back instead. A Spark DataFrame among the
    arguments reaches the ranks as a handle for ``jupyter_torchdist.batches``; ``data_workers`` Spark tasks
    prepare its batches (default: the session's task slots beyond the ranks'). ``max_restarts`` and
    ``checkpoint_dir`` are ``--max-restarts`` and ``--checkpoint-dir`` (``jupyter_torchdist.commit``/``restore``).
    """
    return run_detailed(fn, *args, n=n, gpu=gpu, local=local, timeout=timeout, all_ranks=all_ranks,
                        data_workers=data_workers, max_restarts=max_restarts, checkpoint_dir=checkpoint_dir,
                        **kwargs).value


def spark_session() -> Any:
    """The SparkSession runs use: the notebook's active one, or the embedded local one (started if need be,
    after ``%load_ext``'s warm-up). Build the DataFrames you train on with it; it is the active session."""
    from ..launchers.spark_session import get_session, wait_for_warm_up

    wait_for_warm_up()
    return get_session()[0]
