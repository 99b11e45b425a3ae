"""``DeepspeedTorchDistributor`` with pyspark's constructor and ``run``: change the import, keep the notebook.

``from pyspark.ml.deepspeed.deepspeed_distributor import DeepspeedTorchDistributor`` becomes
``from jupyter_torchdist import DeepspeedTorchDistributor``. As in pyspark, ``numGpus * nnodes`` ranks run, on this
machine (``localMode=True``) or as Spark barrier tasks; a function runs as it is (its value comes back) and a file
runs with its arguments plus ``--deepspeed --deepspeed_config <file>``. Everything else is our TorchDistributor's:
the live view, failures named by rank, the GPU rules and their errors (in this class's argument names).

Where ours differs, on purpose: a config given as a dict is written to a file on each rank's own host (pyspark
writes one on the driver, a path a cluster's executors do not have); a relative config path that exists here is
made absolute (the ranks' working folder may differ); with ``localMode=True`` a config path that does not exist
here is refused before anything starts. Every rank's Python must have the kernel's ``deepspeed`` (checked before
a rank starts, named when an executor lacks it), and Spark's encryption switch is pyspark's for this class,
``deepspeed.spark.distributor.ignoreSsl``.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Final, Mapping, Sequence, Union

from .torch_distributor import TorchDistributor

__all__ = ["DeepspeedTorchDistributor", "DEEPSPEED_IGNORE_SSL_KEY"]

DEEPSPEED_IGNORE_SSL_KEY: Final = "deepspeed.spark.distributor.ignoreSsl"  # pyspark's name for this class
_RENAMED: Final = (("use_gpu", "useGpu"), ("local_mode", "localMode"))

Config = Union[str, "os.PathLike[str]", Mapping[str, Any], None]


def _count(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} has to be a positive integer (e.g. {name}=2), got {value!r}")
    return value


def _checked_config(config: Config, local_mode: bool) -> str | dict[str, Any] | None:
    """The config as a run takes it: a dict (JSON-checked now, not on every rank), a path, or None (DeepSpeed's
    defaults). A path on this machine (local mode) must exist; one relative to here is made absolute."""
    if config is None:
        return None
    if isinstance(config, Mapping):
        try:
            json.dumps(dict(config))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"deepspeedConfig must be JSON-serialisable, as DeepSpeed reads a JSON file: {exc}"
                             ) from None
        return dict(config)
    if isinstance(config, (str, os.PathLike)):
        path = os.fspath(config)
        if os.path.exists(path):
            return os.path.abspath(path)
        if local_mode:
            raise FileNotFoundError(f"deepspeedConfig {path!r} does not exist on this machine, where localMode=True "
                                    "runs the ranks: give the path of a DeepSpeed JSON config, or the config as a dict")
        return path  # a path the executors have (a shared or distributed filesystem): theirs to read
    raise TypeError(f"deepspeedConfig must be a dict, a path to a JSON file or None, not {type(config).__name__}")


class DeepspeedTorchDistributor(TorchDistributor):
    """Run a DeepSpeed function or script on ``numGpus * nnodes`` ranks, as pyspark's class of the same name does.

    ``run(fn, *args, **kwargs)`` returns rank 0's value; ``run("train.py", *args)`` runs the script with ``args``,
    ``--deepspeed`` and ``--deepspeed_config <file>`` (when a config is given) and returns None. Attributes as
    pyspark's: ``deepspeed_config`` (what was given) and those of TorchDistributor.
    """

    _packages = ("deepspeed",)

    def __init__(self, numGpus: int = 1, nnodes: int = 1, localMode: bool = True, useGpu: bool = True,
                 deepspeedConfig: Config = None, *, workdir: str | None = None, pip: str | Sequence[str] = (),
                 requirements: str | None = None) -> None:
        num_processes = _count("numGpus", numGpus) * _count("nnodes", nnodes)
        self._config = _checked_config(deepspeedConfig, bool(localMode))
        self.deepspeed_config = deepspeedConfig
        super().__init__(num_processes, localMode, useGpu, _ssl_conf=DEEPSPEED_IGNORE_SSL_KEY, workdir=workdir, pip=pip,
                         requirements=requirements)
        self.cleanup_deepspeed_conf = False  # pyspark's attribute; a dict's files are removed by the ranks here

    def __repr__(self) -> str:
        return (f"DeepspeedTorchDistributor(num_processes={self.num_processes}, local_mode={self.local_mode}, "
                f"use_gpu={self.use_gpu}, deepspeed_config={self.deepspeed_config!r})")

    @staticmethod
    def _in_our_words(text: str) -> str:
        for ours, theirs in _RENAMED:
            text = text.replace(f"{ours}=", f"{theirs}=")
        return text

    def _script(self, path: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], Any]:
        if kwargs:
            raise ValueError("DeepspeedTorchDistributor with pytorch file doesn't support keyword arguments")
        from ...rank.script import WithConfigFile  # what runs on the rank: loaded when a file runs
        from ..script_source import script_function

        argv = [path, *map(str, args), "--deepspeed"]
        if isinstance(self._config, dict):
            return WithConfigFile(script_function(argv), "--deepspeed_config", json.dumps(self._config))
        return script_function(argv + (["--deepspeed_config", self._config] if self._config else []))
