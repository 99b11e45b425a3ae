"""``TorchDistributor`` with pyspark's constructor and ``run``: change the import, keep the notebook.

``from pyspark.ml.torch.distributor import TorchDistributor`` becomes
``from jupyter_torchdist import TorchDistributor``. ``local_mode=True`` runs the processes on
this machine without Spark (our local launcher); ``local_mode=False`` runs one rank per Spark
barrier task on the active SparkSession. The run is shown live, failures name the rank.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Union

from ..errors import DistributeError, LaunchError
from ..options import RunOptions
from ..views import make_view
from .result import RunResult
from .run import Work, launch

__all__ = ["TorchDistributor"]


def _shell() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


class TorchDistributor:
    """Run a PyTorch function or a torchrun-style script on ``num_processes`` ranks.

    Same arguments and results as pyspark's: ``run(fn, *args, **kwargs)`` returns rank 0's return
    value; ``run("train.py", "--lr", "0.1")`` runs the script with those arguments and returns None.
    The process group is already initialised when the code starts (its own
    ``init_process_group`` call is accepted and does nothing).
    """

    def __init__(self, num_processes: int = 1, local_mode: bool = True, use_gpu: bool = True,
                 _ssl_conf: str = "pytorch.spark.distributor.ignoreSsl") -> None:
        if not isinstance(num_processes, int) or isinstance(num_processes, bool) or num_processes <= 0:
            raise ValueError("num_processes has to be a positive integer")
        self.num_processes = num_processes
        self.local_mode = bool(local_mode)
        self.use_gpu = bool(use_gpu)
        self.ssl_conf = _ssl_conf  # accepted for compatibility: our channel authenticates every rank
        self.last_result: RunResult | None = None

    def __repr__(self) -> str:
        return (f"TorchDistributor(num_processes={self.num_processes}, local_mode={self.local_mode}, "
                f"use_gpu={self.use_gpu})")

    def run(self, train_object: Union[Callable[..., Any], str], *args: Any, **kwargs: Any) -> Any:
        """Run ``train_object`` (a function, or a path to a script) and return rank 0's value (None for a script)."""
        if isinstance(train_object, (str, os.PathLike)):
            if kwargs:
                raise ValueError("Running pytorch file does not support key-word type arguments.")
            from .script import script_function

            fn: Callable[..., Any] = script_function([os.fspath(train_object), *map(str, args)])
            args, title = (), f"TorchDistributor.run({os.fspath(train_object)!r})"
        elif callable(train_object):
            fn, title = train_object, f"TorchDistributor.run({getattr(train_object, '__name__', 'fn')})"
        else:
            raise TypeError(f"train_object must be a function or a path to a script, not {type(train_object).__name__}")
        options = RunOptions(n=self.num_processes, gpu=self.use_gpu, local=self.local_mode)
        try:
            self.last_result = launch(Work(fn, tuple(args), kwargs, title=f"{title} on {self.num_processes}"),
                                      options, make_view(_shell()))
        except DistributeError as exc:
            self.last_result = exc.result if isinstance(exc.result, RunResult) else None
            if isinstance(exc, LaunchError) and self.use_gpu and "gpu" in str(exc).lower():
                raise LaunchError(f"{exc}\n(TorchDistributor's use_gpu defaults to True, as in pyspark: "
                                  "pass use_gpu=False to train on the CPU.)") from None
            raise
        return None if isinstance(train_object, (str, os.PathLike)) else self.last_result.value
