"""jupyter-torchdist: distributed PyTorch training from a notebook cell.

``%load_ext jupyter_torchdist`` then ``%%distribute -n 4`` on top of an ordinary training loop.
"""
from __future__ import annotations

from typing import Any

from .api import run, run_detailed
from .errors import DistributeError, LaunchError, RunFailed, RunInterrupted, RunTimeout
from .rank_api import (barrier, device, is_main, local_rank, local_world_size, main_first, on_main, rank, report,
                   world_size)
from .torch_distributor import TorchDistributor

__version__ = "0.1.0"

__all__ = [
    "run", "run_detailed", "report", "rank", "local_rank", "world_size", "local_world_size", "is_main",
    "device", "barrier", "main_first", "on_main", "DistributeError", "LaunchError", "RunFailed",
    "RunTimeout", "RunInterrupted", "TorchDistributor", "load_ipython_extension", "unload_ipython_extension",
]


def load_ipython_extension(ipython: Any) -> None:
    from .magic import load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .magic import unload

    unload(ipython)


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter-torchdist"}]
