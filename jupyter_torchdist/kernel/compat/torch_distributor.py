"""``TorchDistributor`` with pyspark's constructor and ``run``: change the import, keep the notebook.

``from pyspark.ml.torch.distributor import TorchDistributor`` becomes
``from jupyter_torchdist import TorchDistributor``. ``local_mode=True`` runs the processes on
this machine without Spark (our local launcher); ``local_mode=False`` runs one rank per Spark
barrier task on the active SparkSession. The run is shown live, failures name the rank.

What pyspark's constructor decides, ours decides alike, before anything runs: ``input_params`` and ``num_tasks``,
a ``RuntimeError`` naming the setting when ``use_gpu=True`` finds no GPU configured, and in local mode
``num_processes`` capped at the driver's GPUs with a warning on the ``TorchDistributor`` logger. Which GPUs count:
those the notebook's own SparkSession configures, as in pyspark; with no session of the notebook's (none, or only
our embedded local one, which nobody configured) the ranks run on this machine, so this machine's GPUs.

Where the ranks run, and what each sees, is pyspark's layout, not ``%%distribute``'s: pyspark runs one torchrun per
Spark task, so each task's ranks are a node of their own (``RunOptions.task_nodes``): a rank sees its task's GPUs
only, ``LOCAL_RANK`` counts within the task, the node rank is the task's; in local mode the ranks share
``num_processes`` of the driver's GPUs, drawn as pyspark draws them (``_gpus``). Code written for pyspark's class
(``cuda:0``, Lightning's ``Trainer(devices=1, num_nodes=N)``) lands where it lands there.
"""
from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence, Union

from ...core.errors import DistributeError, LaunchError
from ...launchers.session.tls_consent import IGNORE_SSL_KEY, require_ssl_consent, session_conf
from ...launchers.session.notebook import notebook_session
from ...core.options import RunOptions
from ...views import make_view
from ..runs.run import RunResult
from ..runs.driver import Work, launch

__all__ = ["TorchDistributor", "GpuFacts", "gpu_plan"]

_CPU_HINT = "pass use_gpu=False to train on the CPU"


def _shell() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


# -- which SparkSession decides ----------------------------------------------------------------------------------
_notebook_session = notebook_session  # (a name of this module: tests stand in for it)


def _is_remote(session: Any) -> bool:
    return session is not None and type(session).__module__.startswith("pyspark.sql.connect")


# -- the GPU rule ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuFacts:
    """What decides where ``use_gpu=True`` finds GPUs. With ``from_session`` the notebook's SparkSession does (its
    conf, as pyspark reads it); without, this machine's ``visible`` GPUs (the ranks run here)."""

    from_session: bool
    driver_amount: str | None = None        # spark.driver.resource.gpu.amount
    driver_has_gpu: bool | None = None      # "gpu" among the driver's resources (None: the session cannot say)
    task_amount: str | None = None          # spark.task.resource.gpu.amount
    visible: tuple[str, ...] = ()           # this machine's GPUs (CUDA_VISIBLE_DEVICES, else torch's count)


@dataclass(frozen=True)
class GpuPlan:
    num_processes: int
    num_tasks: int
    warning: str | None = None              # set when num_processes was capped


def _amount(key: str, value: str | None) -> float:
    """A GPU amount setting as a number (0 when unset); a value that is not a number is refused by name."""
    if value is None or not str(value).strip():
        return 0.0
    try:
        return float(value)
    except ValueError:
        raise LaunchError(f"{key}={value!r} is not a number of GPUs: set it to a whole number such as 1, or "
                          f"{_CPU_HINT}.") from None


def _driver_gpus(facts: GpuFacts) -> int:
    """How many GPUs a local-mode run has (refusing with what to set when none)."""
    key = "spark.driver.resource.gpu.amount"
    if not facts.from_session:
        if not facts.visible:
            raise LaunchError(
                "use_gpu=True with local_mode=True trains on this machine's (the driver's) GPUs, but it shows none "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}, no CUDA device seen by "
                f"torch). Check nvidia-smi and CUDA_VISIBLE_DEVICES, or {_CPU_HINT}.")
        return len(facts.visible)
    amount = int(_amount(key, facts.driver_amount))
    if amount < 1 or facts.driver_has_gpu is False:
        why = f"{key} is {facts.driver_amount or 'unset'}" if amount < 1 else "the driver found no 'gpu' resource"
        raise LaunchError(
            f"use_gpu=True with local_mode=True trains on the driver's GPUs, but this SparkSession gives the driver "
            f"none ({why}). Create the session with {key} set to the driver's GPU count (and "
            f"spark.driver.resource.gpu.discoveryScript), or {_CPU_HINT}.")
    return amount


def _cluster_tasks(num_processes: int, facts: GpuFacts) -> int:
    """How many Spark tasks a cluster run takes: one per ``spark.task.resource.gpu.amount`` GPUs, as pyspark counts."""
    key = "spark.task.resource.gpu.amount"
    if not facts.from_session:
        if not facts.visible:
            raise LaunchError(
                f"use_gpu=True gives each Spark task a GPU, but {key} is unset (no SparkSession of the notebook's is "
                "active) and this machine, where the embedded local session would run the ranks, shows no GPU "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}). On a cluster, create "
                f"the SparkSession first with {key}=1, spark.executor.resource.gpu.amount and its discoveryScript; "
                f"or {_CPU_HINT}.")
        return num_processes
    amount = _amount(key, facts.task_amount)
    if amount < 1:
        state = "unset" if amount == 0 else f"{facts.task_amount}, below one GPU per task"
        raise LaunchError(
            f"use_gpu=True gives each Spark task a GPU, but {key} is {state} on this SparkSession, so its tasks get "
            f"none. Create the session with {key}=1 (and spark.executor.resource.gpu.amount with its "
            f"discoveryScript), or {_CPU_HINT}.")
    per_task = int(amount)
    if num_processes % per_task:
        raise LaunchError(
            f"num_processes={num_processes} must be a multiple of {key} ({per_task}): each Spark task holds "
            f"{per_task} GPUs. Ask for a multiple of {per_task} processes, or set {key}=1.")
    return num_processes // per_task


def gpu_plan(num_processes: int, local_mode: bool, facts: GpuFacts) -> GpuPlan:
    """pyspark's rule for ``use_gpu=True``: refuse (LaunchError, a RuntimeError) when no GPU is configured; in local
    mode cap ``num_processes`` at the driver's GPUs (saying so); on a cluster one task per task-GPU amount."""
    if not local_mode:
        return GpuPlan(num_processes, _cluster_tasks(num_processes, facts))
    gpus = _driver_gpus(facts)
    if num_processes <= gpus:
        return GpuPlan(num_processes, num_processes)
    where = "spark.driver.resource.gpu.amount" if facts.from_session else "visible on this machine"
    return GpuPlan(gpus, gpus, warning=(
        f"num_processes={num_processes} is more than the driver's {gpus} GPUs ({where}): num_processes was set to "
        f"{gpus}, one process per GPU."))


def _gpu_facts(session: Any, local_mode: bool) -> GpuFacts:
    """Read what ``gpu_plan`` needs, and only that (no torch import when a session decides)."""
    if session is None:
        from ...core.gpus import visible_gpus

        return GpuFacts(from_session=False, visible=tuple(visible_gpus()))
    conf = session_conf(session)
    if not local_mode:
        return GpuFacts(from_session=True, task_amount=conf("spark.task.resource.gpu.amount"))
    from ...launchers.session.embedded import driver_has_gpu

    has_gpu = None if _is_remote(session) else driver_has_gpu(session)
    return GpuFacts(from_session=True, driver_amount=conf("spark.driver.resource.gpu.amount"), driver_has_gpu=has_gpu)


def _driver_owned(session: Any) -> list[str]:
    """The GPUs Spark's resources give the driver, as CUDA_VISIBLE_DEVICES entries (pyspark's ``_get_gpus_owned``:
    indexes into the kernel's own CUDA_VISIBLE_DEVICES when it has one); empty when it has none."""
    from ...core.gpus import NoGpuError, task_gpus
    from ...launchers.session.embedded import driver_resources

    resources = driver_resources(session)
    if resources is None:
        return []
    try:
        return task_gpus(resources)
    except NoGpuError as exc:
        raise LaunchError(f"the driver's GPU resources do not fit this machine: {exc}") from None


# -- the class ---------------------------------------------------------------------------------------------------
class TorchDistributor:
    """Run a PyTorch function or a torchrun-style script on ``num_processes`` ranks.

    Same arguments and results as pyspark's: ``run(fn, *args, **kwargs)`` returns rank 0's return
    value; ``run("train.py", "--lr", "0.1")`` runs the script with those arguments and returns None.
    The process group is already initialised when the code starts (its own
    ``init_process_group`` call is accepted and does nothing).

    Attributes as pyspark's: ``num_processes`` (after the local-mode GPU cap), ``local_mode``, ``use_gpu``,
    ``num_tasks``, ``input_params`` (those four), ``ssl_conf``, ``spark`` (the notebook's SparkSession, or None
    when it has none: our embedded session is not it), ``is_remote`` and ``logger``; ours adds ``last_result``, and
    the keywords ``workdir``, ``pip`` and ``requirements`` (``--workdir``, ``--pip``, ``--requirements``: the
    notebook's folder and the packages every rank's host gets).
    """

    def __init__(self, num_processes: int = 1, local_mode: bool = True, use_gpu: bool = True,
                 _ssl_conf: str = IGNORE_SSL_KEY, *, workdir: str | None = None, pip: str | Sequence[str] = (),
                 requirements: str | None = None) -> None:
        if not isinstance(num_processes, int) or isinstance(num_processes, bool) or num_processes <= 0:
            raise ValueError("num_processes has to be a positive integer")
        self.logger = logging.getLogger(type(self).__name__)  # pyspark's logger name, for code that listens to it
        self.spark = _notebook_session()
        self.is_remote = _is_remote(self.spark)
        self.num_processes = num_processes
        self.local_mode = bool(local_mode)
        self.use_gpu = bool(use_gpu)
        self.ssl_conf = _ssl_conf
        # beyond pyspark's: the notebook's folder, packages and requirements for every rank (--workdir, --pip, ...)
        self._workdir, self._requirements = workdir, requirements
        self._pip = (pip,) if isinstance(pip, str) else tuple(pip)
        try:
            self.num_tasks = self._get_num_tasks()
        except LaunchError as exc:
            raise LaunchError(self._in_our_words(str(exc))) from None
        self.input_params: dict[str, Any] = {"num_processes": self.num_processes, "local_mode": self.local_mode,
                                             "use_gpu": self.use_gpu, "num_tasks": self.num_tasks}
        self.last_result: RunResult | None = None

    def __repr__(self) -> str:
        return (f"TorchDistributor(num_processes={self.num_processes}, local_mode={self.local_mode}, "
                f"use_gpu={self.use_gpu})")

    def _get_num_tasks(self) -> int:
        """The Spark tasks a run takes, as pyspark counts them; with ``use_gpu`` it checks the GPUs first (and in
        local mode may lower ``num_processes``, with a warning). Named as pyspark's, for code that calls it."""
        if not self.use_gpu:
            return self.num_processes
        plan = gpu_plan(self.num_processes, self.local_mode, _gpu_facts(self.spark, self.local_mode))
        if plan.warning:
            self.logger.warning(plan.warning)
        self.num_processes = plan.num_processes
        return plan.num_tasks

    def _check_encryption(self) -> None:
        """pyspark's check, for code that calls it: raise (a RuntimeError) when the session has
        ``spark.ssl.enabled=true`` without ``ssl_conf``; log a warning when the switch lets runs go. Runs on Spark
        are checked by their launcher (``launchers/session/tls_consent.py``), whichever API started them."""
        from ...channel.tls import tls_requested
        from ...launchers.session.embedded import embedded_session

        session = self.spark or embedded_session()
        if session is None:
            return  # no session: nothing asks for TLS
        conf = session_conf(session)
        warning = require_ssl_consent(conf, tls_requested(conf), self.ssl_conf)
        if warning:
            self.logger.warning(warning)

    @staticmethod
    def _in_our_words(text: str) -> str:
        """An error about the constructor's arguments, named as this class names them."""
        return text

    _packages: tuple[str, ...] = ()  # what every rank's Python must have besides torch (DeepSpeed's class: deepspeed)

    def _gpus(self, train_object: Any) -> tuple[str, ...]:
        """The GPUs the ranks take on this machine, picked from the driver's as pyspark picks them (Spark's resources,
        read through the kernel's CUDA_VISIBLE_DEVICES): ``local_mode=True`` draws ``num_processes`` of them with
        ``random.sample`` seeded by ``hash(train_object)``, as pyspark seeds it (the notebook's own ``random`` is
        left alone); on a local master each task takes the next, in order. Empty where no classic session of the
        notebook's owns GPUs (and on a cluster, where Spark schedules them): the kernel's visible GPUs, in order."""
        if not self.use_gpu or self.spark is None or self.is_remote:
            return ()
        from ...launchers.session.embedded import session_master

        if not self.local_mode and not session_master(self.spark).startswith("local"):
            return ()
        owned = _driver_owned(self.spark)
        if not owned or not self.local_mode:
            return tuple(owned)
        if len(owned) < self.num_processes:
            raise LaunchError(f"use_gpu=True with local_mode=True needs {self.num_processes} of the driver's GPUs, but "
                              f"Spark gives the driver {len(owned)} ({', '.join(owned)}): set "
                              "spark.driver.resource.gpu.amount (and its discoveryScript) to the driver's GPU count.")
        return tuple(random.Random(hash(train_object)).sample(owned, self.num_processes))

    def _script(self, path: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], Any]:
        """The call that runs a script on a rank: ``python path args...``, as torchrun would."""
        if kwargs:
            raise ValueError("Running pytorch file does not support key-word type arguments.")
        from ..script_source import script_function

        return script_function([path, *map(str, args)])

    def run(self, train_object: Union[Callable[..., Any], str], *args: Any, **kwargs: Any) -> Any:
        """Run ``train_object`` (a function, or a path to a script) and return rank 0's value (None for a script)."""
        name = type(self).__name__
        if isinstance(train_object, (str, os.PathLike)):
            fn: Callable[..., Any] = self._script(os.fspath(train_object), args, kwargs)
            args, kwargs, title = (), {}, f"{name}.run({os.fspath(train_object)!r})"
        elif callable(train_object):
            fn, title = train_object, f"{name}.run({getattr(train_object, '__name__', 'fn')})"
        else:
            raise TypeError(f"train_object must be a function or a path to a script, not {type(train_object).__name__}")
        options = RunOptions(n=self.num_processes, gpu=self.use_gpu, local=self.local_mode,  # --wait's default
                             spark_tasks=not self.local_mode, packages=self._packages, ssl_switch=self.ssl_conf,
                             task_nodes=not self.local_mode, gpus=self._gpus(train_object),
                             workdir=self._workdir, pip=self._pip, requirements=self._requirements)
        try:
            self.last_result = launch(Work(fn, tuple(args), kwargs, title=f"{title} on {self.num_processes}"),
                                      options, make_view(_shell()))
        except DistributeError as exc:
            self.last_result = exc.result if isinstance(exc.result, RunResult) else None
            if isinstance(exc, LaunchError) and self.use_gpu and "gpu" in str(exc).lower():
                raise LaunchError(self._in_our_words(f"{exc}\n({name}'s use_gpu defaults to True, as in pyspark: "
                                                     "pass use_gpu=False to train on the CPU.)")) from None
            raise
        return None if isinstance(train_object, (str, os.PathLike)) else self.last_result.value
