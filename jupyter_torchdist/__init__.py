"""jupyter-torchdist: distributed PyTorch training from a notebook cell.

``%load_ext jupyter_torchdist`` then ``%%distribute -n 4`` on top of an ordinary training loop.

The public API: the Python launcher (``run``, ``run_detailed``, ``last_run``, ``RunResult``,
``TorchDistributor``, ``DeepspeedTorchDistributor``, ``Ranks``), runs the notebook holds (``Run``, ``runs``,
``sweep``, ``Sweep``, ``flush_tracking``), the rank-side
helpers (``report``, ``rank``, ``world_size``, ``batches`` ...), and the errors.
Everything else is internal and may move.

The kernel-side names are imported when first used (PEP 562): importing this package is what every process of
ours does first (the process server that imports torch for the first run, each rank, each Spark worker), and the
kernel's side of the API (the launcher, runs, sweeps, the DataFrame reader) cost about 0.15 s there, on the way
to the first cell's value. The rank-side helpers and the errors are light and bound at once (``rank`` must be:
it is also the name of the ``rank`` subpackage, which any import of ``jupyter_torchdist.rank.*`` would bind here).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .core.errors import (CaptureError, DistributeError, LaunchError, MemberFailed, MemberStoppedEarly, OptionsError,
                          RunError, RunFailed, RunInterrupted, RunTimeout)
from .core.space import choice, intrange, loguniform, uniform
from .rank.api import (barrier, commit, device, is_main, local_rank, local_world_size, main_first, on_main,
                       preempted, rank, report, restore, world_size)

if TYPE_CHECKING:
    from .data import DataError
    from .data.batches import batches
    from .kernel.compat.deepspeed_distributor import DeepspeedTorchDistributor
    from .kernel.compat.torch_distributor import TorchDistributor
    from .kernel.detached.client import DetachedRun, DetachedSweep
    from .kernel.kept.ranks import KeptInfo, Ranks
    from .kernel.magics.kept import kept
    from .kernel.notebook_api import run, run_detailed, spark_session, sweep
    from .kernel.runs.driver import last_run
    from .kernel.runs.run import Run, RunResult
    from .kernel.sweeps.sweep import Sweep
    from .tracking.shipper import flush as flush_tracking

# name -> (module, its name there): bound here the first time it is asked for
_LAZY: dict[str, tuple[str, str]] = {
    "DataError": (".data", "DataError"),
    "batches": (".data.batches", "batches"),
    "run": (".kernel.notebook_api", "run"),
    "run_detailed": (".kernel.notebook_api", "run_detailed"),
    "spark_session": (".kernel.notebook_api", "spark_session"),
    "sweep": (".kernel.notebook_api", "sweep"),
    "Run": (".kernel.runs.run", "Run"),
    "RunResult": (".kernel.runs.run", "RunResult"),
    "last_run": (".kernel.runs.driver", "last_run"),
    "Sweep": (".kernel.sweeps.sweep", "Sweep"),
    "DetachedRun": (".kernel.detached.client", "DetachedRun"),
    "DetachedSweep": (".kernel.detached.client", "DetachedSweep"),
    "KeptInfo": (".kernel.kept.ranks", "KeptInfo"),
    "Ranks": (".kernel.kept.ranks", "Ranks"),
    "kept": (".kernel.magics.kept", "kept"),
    "TorchDistributor": (".kernel.compat.torch_distributor", "TorchDistributor"),
    "DeepspeedTorchDistributor": (".kernel.compat.deepspeed_distributor", "DeepspeedTorchDistributor"),
    "flush_tracking": (".tracking.shipper", "flush"),
}

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
    from .kernel.runs.history import runs as kernel_runs

    return kernel_runs()


def attach(run_id: str) -> DetachedRun:
    """A detached run's handle, from any kernel of the same user: ``state``, ``wait()``, ``result()``, ``value``,
    ``stop()``, and its live view when displayed (``%distribute_attach ID`` shows it in a cell); a detached sweep's
    is a ``DetachedSweep`` (``rows()``, ``results()``, ``best()`` besides)."""
    from .kernel.detached.client import attach as _attach

    return _attach(run_id)


def __getattr__(name: str) -> Any:
    """The kernel-side names, imported on first use (``_LAZY``); and names kept for code written against earlier
    releases, each with a warning that says what to use now."""
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module, __name__), attr)
        globals()[name] = value
        return value
    if name == "MemberPruned":
        import warnings

        warnings.warn("jupyter_torchdist.MemberPruned is now MemberStoppedEarly (the early-stopping rules' one word): "
                      "catch jupyter_torchdist.MemberStoppedEarly", DeprecationWarning, stacklevel=2)
        return MemberStoppedEarly
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def load_ipython_extension(ipython: Any) -> None:
    from .launchers import start_process_server

    start_process_server()  # first: it imports torch for the first run while the rest loads
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
