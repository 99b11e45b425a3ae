"""TorchDistributor's constructor decides what pyspark's does, before anything runs: ``input_params`` and
``num_tasks``, GPU refusals naming the setting, the local-mode cap with its warning on the ``TorchDistributor``
logger, pyspark's ``_check_encryption``; errors catchable as pyspark's (RuntimeError). Sessions are faked here (the
rules read only a session's conf and driver resources); real sessions: ranks/test_torch_distributor.py."""
from __future__ import annotations

import logging
import threading
import types

import pytest

from jupyter_torchdist import TorchDistributor
from jupyter_torchdist.core.errors import (CaptureError, LaunchError, OptionsError, RunError, RunFailed, RunInterrupted,
                                      RunTimeout)
from jupyter_torchdist.kernel.compat import torch_distributor as td
from jupyter_torchdist.kernel.compat.torch_distributor import GpuFacts, gpu_plan
from jupyter_torchdist.launchers import spark as spark_mod
from jupyter_torchdist.launchers.session import notebook as sessions, embedded as spark_session
from jupyter_torchdist.core.options import DEFAULT_WAIT_S, RunOptions


class FakeConf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class FakeSession:
    """A notebook's classic SparkSession: its runtime conf and its driver's resources."""

    def __init__(self, conf: dict[str, str] | None = None, resources: tuple[str, ...] = ()) -> None:
        self.conf = FakeConf(dict(conf or {}))
        self.sparkContext = types.SimpleNamespace(resources={name: object() for name in resources})


@pytest.fixture
def session(monkeypatch):
    """Make ``FakeSession``s the notebook's session: ``session(conf, resources)``."""
    def use(conf: dict[str, str] | None = None, resources: tuple[str, ...] = ()) -> FakeSession:
        made = FakeSession(conf, resources)
        monkeypatch.setattr(td, "_notebook_session", lambda: made)
        return made
    return use


@pytest.fixture
def no_session(monkeypatch):
    monkeypatch.setattr(td, "_notebook_session", lambda: None)


DRIVER_3 = {"spark.driver.resource.gpu.amount": "3"}


# -- input_params and the attributes pyspark's tests read ---------------------------------------------------------
@pytest.mark.parametrize("n,local", [(1, True), (100, True), (1, False), (100, False)])
def test_input_params_are_pysparks(no_session, n, local):
    dist = TorchDistributor(n, local, False)
    assert dist.input_params == {"num_processes": n, "local_mode": local, "use_gpu": False, "num_tasks": n}
    assert dist.num_tasks == n and dist.ssl_conf == "pytorch.spark.distributor.ignoreSsl"
    assert dist.spark is None and dist.is_remote is False and dist.logger.name == "TorchDistributor"


def test_the_session_it_sees_is_the_notebooks(session):
    made = session()
    assert TorchDistributor(2, False, False).spark is made


# -- the GPU rule, pure ------------------------------------------------------------------------------------------
def test_local_mode_refuses_a_session_that_gives_the_driver_no_gpu():
    for facts in (GpuFacts(from_session=True), GpuFacts(from_session=True, driver_amount="0"),
                  GpuFacts(from_session=True, driver_amount="3", driver_has_gpu=False)):
        with pytest.raises(RuntimeError, match="driver") as info:
            gpu_plan(2, True, facts)
        text = str(info.value)
        assert "spark.driver.resource.gpu.amount" in text and "use_gpu=False to train on the CPU" in text


def test_local_mode_caps_num_processes_at_the_drivers_gpus_and_says_so():
    facts = GpuFacts(from_session=True, driver_amount="3", driver_has_gpu=True)
    assert gpu_plan(2, True, facts) == td.GpuPlan(2, 2, None)
    plan = gpu_plan(8, True, facts)
    assert (plan.num_processes, plan.num_tasks) == (3, 3)
    assert "num_processes=8" in (plan.warning or "") and "set to 3" in (plan.warning or "")


def test_cluster_mode_counts_tasks_by_the_task_gpu_amount_as_pyspark():
    facts = lambda amount: GpuFacts(from_session=True, task_amount=amount)
    assert gpu_plan(8, False, facts("1")).num_tasks == 8
    assert gpu_plan(8, False, facts("2")).num_tasks == 4
    with pytest.raises(RuntimeError, match="multiple of spark.task.resource.gpu.amount"):
        gpu_plan(8, False, facts("3"))


@pytest.mark.parametrize("amount,said", [(None, "is unset"), ("0", "is unset"), ("0.5", "below one GPU per task"),
                                         ("lots", "is not a number")])
def test_cluster_mode_refuses_without_a_task_gpu_amount(amount, said):
    with pytest.raises(RuntimeError, match="spark.task.resource.gpu.amount") as info:
        gpu_plan(2, False, GpuFacts(from_session=True, task_amount=amount))
    assert said in str(info.value) and "use_gpu=False to train on the CPU" in str(info.value)


def test_without_a_notebook_session_this_machines_gpus_decide(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(RuntimeError, match="CUDA_VISIBLE_DEVICES=") as info:
        gpu_plan(2, True, GpuFacts(from_session=False))
    assert "use_gpu=False" in str(info.value)
    with pytest.raises(RuntimeError, match="unset"):
        gpu_plan(2, False, GpuFacts(from_session=False))
    plan = gpu_plan(4, True, GpuFacts(from_session=False, visible=("0", "1")))
    assert (plan.num_processes, plan.num_tasks) == (2, 2) and "visible on this machine" in (plan.warning or "")
    assert gpu_plan(4, False, GpuFacts(from_session=False, visible=("0",))).num_tasks == 4  # the launcher counts


# -- the constructor applies it ----------------------------------------------------------------------------------
def test_constructor_refuses_use_gpu_without_gpus_as_a_runtime_error(no_session, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(RuntimeError, match="use_gpu=False"):
        TorchDistributor(2, True, True)


def test_constructor_refuses_with_the_sessions_setting_named(session):
    session()
    with pytest.raises(RuntimeError, match="driver"):
        TorchDistributor(1, True, True)
    with pytest.raises(RuntimeError, match="unset"):
        TorchDistributor(1, False, True)


def test_constructor_caps_local_mode_with_one_warning_on_the_torchdistributor_logger(session, caplog):
    session(DRIVER_3, resources=("gpu",))
    with caplog.at_level(logging.WARNING, logger="TorchDistributor"):
        dist = TorchDistributor(8, True, True)
    records = [r for r in caplog.records if r.name == "TorchDistributor"]
    assert len(records) == 1 and records[0].levelno == logging.WARNING
    assert dist.num_processes == 3 and dist.input_params["num_processes"] == 3 and dist.num_tasks == 3
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="TorchDistributor"):
        assert TorchDistributor(2, True, True).num_processes == 2
    assert not caplog.records


def test_constructor_reads_the_cluster_task_amount(session):
    session({"spark.task.resource.gpu.amount": "2"})
    dist = TorchDistributor(8, False, True)
    assert dist.num_tasks == 4 and dist.num_processes == 8


def test_num_processes_is_checked_first(session):
    session()
    with pytest.raises(ValueError, match="positive"):
        TorchDistributor(0, False, True)


# -- which session counts ----------------------------------------------------------------------------------------
def _session(alive: bool = True) -> types.SimpleNamespace:
    """A classic session as the finder reads it: its SparkContext, whose JVM side ``stop()`` clears."""
    sc = types.SimpleNamespace(_jsc=object() if alive else None)
    return types.SimpleNamespace(_sc=sc, sparkContext=sc)


def test_the_notebook_session_is_the_main_threads_from_every_thread_without_importing_pyspark(monkeypatch):
    """The JVM keeps the active session per thread: a background run's thread sees none. The notebook's session is
    the one its main thread last had active (else pyspark's last built), while it lives; our embedded one is not."""
    monkeypatch.setattr(sessions, "connect_session", lambda: None)
    monkeypatch.setattr(sessions, "_seen_on_main", None)
    monkeypatch.delitem(__import__("sys").modules, "pyspark.sql", raising=False)
    assert td._notebook_session() is None  # pyspark not loaded: no session can exist
    per_thread = threading.local()
    users, ours = _session(), _session()

    class SparkSession:
        _instantiatedSession = None

        @staticmethod
        def getActiveSession():
            return getattr(per_thread, "active", None)

    monkeypatch.setitem(__import__("sys").modules, "pyspark.sql", types.SimpleNamespace(SparkSession=SparkSession))
    per_thread.active = users   # the main thread built it
    assert td._notebook_session() is users

    def on_a_thread() -> object:
        out: list[object] = []
        t = threading.Thread(target=lambda: out.append(td._notebook_session()))
        t.start()
        t.join()
        return out[0]

    assert on_a_thread() is users   # its active session is None there: the main thread's counts
    sessions.mark_ours(ours)
    try:
        per_thread.active = ours    # the main thread now has our embedded session active
        assert td._notebook_session() is None and on_a_thread() is None
        monkeypatch.setattr(sessions, "_seen_on_main", None)  # a session built on a thread of the user's own
        per_thread.active, SparkSession._instantiatedSession = None, users
        assert on_a_thread() is users   # pyspark's last built, as SparkSession.active() falls back to
        users._sc._jsc = None       # spark.stop()
        assert td._notebook_session() is None and on_a_thread() is None
    finally:
        sessions.mark_ours(None)


def test_the_embedded_session_is_recognised_by_its_spark_context():
    context = object()
    sessions.mark_ours(types.SimpleNamespace(sparkContext=context))
    try:
        assert spark_session.is_embedded(types.SimpleNamespace(sparkContext=context))
        assert not spark_session.is_embedded(types.SimpleNamespace(sparkContext=object()))
        assert not spark_session.is_embedded(object())  # a Connect session has no SparkContext
    finally:
        sessions.mark_ours(None)


# -- pyspark's _check_encryption ---------------------------------------------------------------------------------
def test_check_encryption_refuses_as_pyspark(session, monkeypatch):
    monkeypatch.delenv("JUPYTER_TORCHDIST_CHANNEL_TLS", raising=False)
    made = session({"spark.ssl.enabled": "true"})
    dist = TorchDistributor(1, True, False)
    with pytest.raises(RuntimeError, match="encryption"):
        dist._check_encryption()
    made.conf.values["pytorch.spark.distributor.ignoreSsl"] = "true"
    dist._check_encryption()
    made.conf.values["spark.ssl.enabled"] = "false"
    made.conf.values["pytorch.spark.distributor.ignoreSsl"] = "false"
    dist._check_encryption()


def test_check_encryption_warns_on_the_logger_when_the_switch_lets_it_go(session, caplog):
    session({"spark.ssl.enabled": "true", "my.ignoreSsl": "true"})
    dist = TorchDistributor(1, True, False, _ssl_conf="my.ignoreSsl")
    with caplog.at_level(logging.WARNING, logger="TorchDistributor"):
        dist._check_encryption()
    assert any("not encrypted" in r.getMessage() for r in caplog.records)


def test_check_encryption_without_any_session_has_nothing_to_check(no_session, monkeypatch):
    monkeypatch.setattr(spark_session, "_embedded", None)
    TorchDistributor(1, True, False)._check_encryption()   # raises if it found something to refuse
    assert spark_session._embedded is None, "checking started no session"


# -- run() -------------------------------------------------------------------------------------------------------
def test_run_uses_the_default_wait_for_task_slots(no_session, monkeypatch):
    """So a cluster session whose executors are still registering is waited for, as by %%distribute."""
    seen = []
    monkeypatch.setattr(td, "launch", lambda work, options, view: seen.append(options) or
                        types.SimpleNamespace(value=7))
    assert TorchDistributor(3, False, False).run(len, [1]) == 7
    assert seen == [RunOptions(n=3, gpu=False, local=False, spark_tasks=True, task_nodes=True,  # pyspark's layout
                               ssl_switch="pytorch.spark.distributor.ignoreSsl")] and seen[0].wait == DEFAULT_WAIT_S > 0


def test_several_gpus_per_task_run_a_rank_on_each_as_pyspark_runs_a_process_on_each(session, monkeypatch):
    """pyspark: 2 tasks of torchrun --nproc_per_node=2; ours: 4 ranks, the Spark launcher puts 2 in each task."""
    session({"spark.task.resource.gpu.amount": "2"})
    seen = []
    monkeypatch.setattr(td, "launch", lambda work, options, view: seen.append(options) or
                        types.SimpleNamespace(value=7))
    dist = TorchDistributor(4, False, True)
    assert (dist.num_processes, dist.num_tasks) == (4, 2)
    assert dist.run(len, [1]) == 7 and seen[0].n == 4 and seen[0].gpu
    assert seen[0].task_nodes and seen[0].gpus == (), "each task's two ranks a node of their own, as pyspark's torchrun"


def test_local_mode_draws_the_drivers_gpus_as_pyspark_draws_them(session, monkeypatch):
    """pyspark: ``random.seed(hash(train_object)); random.sample(driver's GPUs, num_processes)``, the driver's GPUs
    read through its CUDA_VISIBLE_DEVICES. Ours draws the same GPUs and leaves the notebook's ``random`` alone; on a
    local master with local_mode=False each task takes the driver's next GPU, in order."""
    import random

    made = session({"spark.driver.resource.gpu.amount": "4", "spark.task.resource.gpu.amount": "1"}, ("gpu",))
    made.sparkContext = types.SimpleNamespace(master="local[4]",
                                              resources={"gpu": types.SimpleNamespace(addresses=["0", "1", "2", "3"])})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7,5,3,1")
    seen: list[RunOptions] = []
    monkeypatch.setattr(td, "launch", lambda work, options, view: seen.append(options) or
                        types.SimpleNamespace(value=7))

    def train() -> None:
        pass

    random.seed(12345)
    mine = random.getstate()
    TorchDistributor(2, True, True).run(train)
    assert random.getstate() == mine, "the notebook's random is not reseeded"
    random.seed(hash(train))  # pyspark's own lines (_run_local_training)
    assert seen[0].gpus == tuple(random.sample(["7", "5", "3", "1"], 2)) and not seen[0].task_nodes
    TorchDistributor(4, False, True).run(train)
    assert seen[1].gpus == ("7", "5", "3", "1") and seen[1].task_nodes


# -- errors catchable as pyspark's -------------------------------------------------------------------------------
def test_launch_and_run_errors_are_runtime_errors_and_option_errors_stay_value_errors():
    for cls in (LaunchError, CaptureError, RunError, RunFailed, RunTimeout, RunInterrupted):
        assert issubclass(cls, RuntimeError), cls
    assert issubclass(OptionsError, ValueError) and not issubclass(OptionsError, RuntimeError)


# -- local-cluster masters grow: wait for their executors ----------------------------------------------------------
class _Context:
    def __init__(self, master: str, slots: int) -> None:
        self.master, self.defaultParallelism = master, slots


def test_a_local_cluster_master_is_waited_for_and_a_local_one_is_not(capsys):
    """``local-cluster[...]`` has executors that register after the session starts; ``local[N]`` never grows."""
    with pytest.raises(LaunchError, match="after waiting 0.3 s"):
        spark_mod._check_slots(types.SimpleNamespace(sparkContext=_Context("local-cluster[2,1,1024]", 1)), 2,
                               embedded=False, wait_s=0.3)
    assert "waiting for 2 task slots on local-cluster[2,1,1024]" in capsys.readouterr().out
    for master in ("local[1]", "local", "local[1,3]"):
        with pytest.raises(LaunchError, match="has 1. Ask for fewer ranks"):
            spark_mod._check_slots(types.SimpleNamespace(sparkContext=_Context(master, 1)), 2, embedded=False,
                                   wait_s=30)
