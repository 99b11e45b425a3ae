"""jupyter-torchdist: distributed PyTorch training from a notebook cell.

``%load_ext jupyter_torchdist`` then ``%%distribute -n 4`` on top of an ordinary training loop.

The public API: the Python launcher (``run``, ``run_detailed``, ``last_run``, ``RunResult``,
``TorchDistributor``, ``DeepspeedTorchDistributor``, ``Ranks``), runs the notebook holds (``Run``, ``runs``,
``sweep``, ``Sweep``, ``flush_tracking``), the rank-side
helpers (``report``, ``rank``, ``world_size``, ``batches`` ...), and the errors.
Everything else is internal and may move.
"""
from __future__ import annotations

from typing import Any

from .data import DataError
from .data.batches import batches
from .core.errors import (CaptureError, DistributeError, LaunchError, MemberFailed, MemberStoppedEarly, OptionsError,
                          RunError, RunFailed, RunInterrupted, RunTimeout)
from .core.space import choice, intrange, loguniform, uniform
from .kernel.notebook_api import run, run_detailed, spark_session, sweep
from .kernel.runs.run import Run
from .kernel.runs.history import runs as _kernel_runs
from .kernel.sweeps.sweep import Sweep
from .kernel.detached.client import DetachedRun, DetachedSweep
from .kernel.kept.ranks import KeptInfo, Ranks
from .kernel.magics.kept import kept
from .kernel.runs.run import RunResult
from .kernel.runs.driver import last_run
from .kernel.compat.torch_distributor import TorchDistributor
from .kernel.compat.deepspeed_distributor import DeepspeedTorchDistributor
from .tracking.shipper import flush as flush_tracking
from .rank.api import (barrier, commit, device, is_main, local_rank, local_world_size, main_first, on_main,
                       preempted, rank, report, restore, world_size)

__version__ = "0.1.0"

__all__ = [
    "run", "run_detailed", "last_run", "RunResult", "TorchDistributor", "DeepspeedTorchDistributor", "Ranks",
    "KeptInfo", "kept", "spark_session",
    "Run", "runs", "attach", "DetachedRun", "DetachedSweep", "sweep", "Sweep", "loguniform", "uniform", "intrange",
    "choice",
    "flush_tracking",
    "report", "rank", "local_rank", "world_size", "local_world_size", "is_main", "device", "barrier",
    "main_first", "on_main", "batches", "DataError", "commit", "restore", "preempted",
    "DistributeError", "OptionsError", "LaunchError", "CaptureError", "RunError", "RunFailed", "RunTimeout",
    "RunInterrupted", "MemberStoppedEarly", "MemberFailed", "load_ipython_extension", "unload_ipython_extension",
]


def runs(detached: bool = False) -> Any:
    """This kernel's runs, oldest first (a table in a notebook); with ``detached=True``, every detached run kept for
    this user instead (``%%distribute --detach``: from any kernel, running or ended in the last seven days), each a
    handle as ``attach`` gives it."""
    if detached:
        from .kernel.detached.client import detached_runs

        return detached_runs()
    return _kernel_runs()


def attach(run_id: str) -> DetachedRun:
    """A detached run's handle, from any kernel of the same user: ``state``, ``wait()``, ``result()``, ``value``,
    ``stop()``, and its live view when displayed (``%distribute_attach ID`` shows it in a cell); a detached sweep's
    is a ``DetachedSweep`` (``rows()``, ``results()``, ``best()`` besides)."""
    from .kernel.detached.client import attach as _attach

    return _attach(run_id)


def __getattr__(name: str) -> Any:
    """Names kept for code written against earlier releases, each with a warning that says what to use now."""
    if name == "MemberPruned":
        import warnings

        warnings.warn("jupyter_torchdist.MemberPruned is now MemberStoppedEarly (the early-stopping rules' one word): "
                      "catch jupyter_torchdist.MemberStoppedEarly", DeprecationWarning, stacklevel=2)
        return MemberStoppedEarly
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    from .kernel.magics.distribute import load
    from .panel.publisher import start as list_runs

    load(ipython)
    list_runs(ipython)   # this kernel's runs in the "Distributed runs" panel and `jupyter-torchdist runs`


def unload_ipython_extension(ipython: Any) -> None:
    from .kernel.magics.distribute import unload
    from .panel.publisher import stop as unlist_runs

    unlist_runs(ipython)
    unload(ipython)


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter-torchdist"}]
