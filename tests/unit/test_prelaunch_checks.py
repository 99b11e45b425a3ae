"""Refusals before anything launches on a Spark cluster, faked (the checks only read the session's master and
conf): dynamic allocation, too few slots, GPUs without GPU scheduling; and where the channel listens."""
from __future__ import annotations

import pytest

from jupyter_torchdist.core.errors import LaunchError
from jupyter_torchdist.launchers import spark as spark_mod
from jupyter_torchdist.core.options import RunOptions


# -- a cluster, faked: the checks only read the session's master and conf ------------------------------
class _Conf(dict):
    def get(self, key, default=None):  # SparkConf.get(key, default)
        return super().get(key, default)

    def getAll(self):  # SparkConf.getAll(): [(key, value), ...]
        return list(self.items())


class _Context:
    def __init__(self, master: str, conf: dict[str, str], parallelism: int) -> None:
        self.master, self._conf, self.defaultParallelism = master, _Conf(conf), parallelism

    def getConf(self) -> _Conf:
        return self._conf


class _Session:
    def __init__(self, master: str, conf: dict[str, str], parallelism: int = 8) -> None:
        self.sparkContext = _Context(master, conf, parallelism)


def _prepare(monkeypatch, session: _Session, **options):
    monkeypatch.setattr(spark_mod, "get_session", lambda: (session, False))
    return spark_mod.SparkLauncher().prepare(RunOptions(**options))


_DYNAMIC = {"spark.dynamicAllocation.enabled": "true"}


def test_dynamic_allocation_on_a_cluster_starts_ranks_one_by_one_within_the_wait(monkeypatch):
    info = _prepare(monkeypatch, _Session("spark://10.0.0.1:7077", _DYNAMIC, parallelism=0), n=3, wait=30)
    assert info.start_bound_s == 30 and "maxExecutors" in info.start_hint and "dynamic allocation" in info.label


def test_dynamic_allocation_refuses_speculation_and_a_bound_it_can_never_meet(monkeypatch):
    with pytest.raises(LaunchError) as info:
        _prepare(monkeypatch, _Session("spark://h:7077", {**_DYNAMIC, "spark.speculation": "true"}), n=2)
    assert "spark.speculation=false" in str(info.value)
    capped = {**_DYNAMIC, "spark.dynamicAllocation.maxExecutors": "2", "spark.executor.cores": "2",
              "spark.task.cpus": "2"}
    with pytest.raises(LaunchError) as info:
        _prepare(monkeypatch, _Session("spark://h:7077", capped), n=3)
    assert "allows at most 2" in str(info.value) and "maxExecutors" in str(info.value)
    assert _prepare(monkeypatch, _Session("spark://h:7077", capped), n=2).start_bound_s is not None
    with pytest.raises(LaunchError) as info:
        _prepare(monkeypatch, _Session("spark://h:7077", _DYNAMIC), n=2, wait=0)
    assert "--wait 0" in str(info.value)


def test_dynamic_allocation_is_fine_on_a_local_master(monkeypatch):
    info = _prepare(monkeypatch, _Session("local[4]", {"spark.dynamicAllocation.enabled": "true"}), n=2)
    assert info.channel_host == "127.0.0.1" and info.loopback


def test_cluster_slots_error_names_the_cluster_keys(monkeypatch):
    with pytest.raises(LaunchError) as info:
        _prepare(monkeypatch, _Session("spark://10.0.0.1:7077", {}, parallelism=2), n=3, wait=0)
    for key in ("spark.executor.cores", "spark.cores.max", "spark.executor.instances", "spark.task.cpus", "--wait"):
        assert key in str(info.value)


def test_a_cluster_short_of_slots_is_waited_for_then_said(monkeypatch, capsys):
    with pytest.raises(LaunchError) as info:
        _prepare(monkeypatch, _Session("spark://10.0.0.1:7077", {}, parallelism=2), n=3, wait=0.5)
    text = str(info.value)
    assert "after waiting 0.5 s" in text and "has 2" in text
    for key in ("spark.executor.cores", "spark.cores.max", "spark.executor.instances", "spark.task.cpus"):
        assert key in text
    assert "waiting for 3 task slots on spark://10.0.0.1:7077: 2 so far" in capsys.readouterr().out


def test_cluster_gpu_needs_gpu_scheduling_keys(monkeypatch):
    with pytest.raises(LaunchError) as info:
        _prepare(monkeypatch, _Session("spark://10.0.0.1:7077", {"spark.driver.host": "10.0.0.2"}), n=2, gpu=True)
    for key in ("spark.task.resource.gpu.amount", "spark.executor.resource.gpu.amount",
                "spark.executor.resource.gpu.discoveryScript"):
        assert key in str(info.value)
    asked = []  # the executors' preflight (launchers/gpu_preflight.py): its job, asked for with the run's tasks
    monkeypatch.setattr(spark_mod.gpu_preflight, "preflight_classic", lambda sc, tasks, hosts, barrier: asked.append(
        (tasks, barrier)))
    info = _prepare(monkeypatch, _Session("spark://10.0.0.1:7077", {"spark.driver.host": "10.0.0.2",
                                                                     "spark.task.resource.gpu.amount": "1"}),
                    n=2, gpu=True)
    assert info.channel_host == "10.0.0.2" and not info.loopback  # the channel listens where executors reach
    assert asked == [(2, True)], "before the ranks' barrier job, a barrier job of its size asks the executors' torch"
