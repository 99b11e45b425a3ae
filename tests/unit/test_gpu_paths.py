"""Unit: the GPU rules real clusters need beyond one CUDA host (issue 49): pyspark's TorchDistributor layout (each
Spark task a node), MIG instances, ROCm's variables, CUDA_DEVICE_ORDER, and the preflight's verdict on executors
whose torch cannot run a GPU rank. Pure rules: no GPU, no Spark."""
from __future__ import annotations

import json

import pytest

from jupyter_torchdist.core.errors import LaunchError
from jupyter_torchdist.core.gpus import device_env, is_mig, task_gpus, visibility_source, visible_gpus
from jupyter_torchdist.core.rendezvous import plan_rendezvous
from jupyter_torchdist.launchers import gpu_preflight

MIG_A, MIG_B = "MIG-4c1e8f2a-0b3d-5e6f-9a1b-2c3d4e5f6a7b", "MIG-77aa0c1d-2e3f-4a5b-6c7d-8e9f0a1b2c3d"


class _Gpu:  # what BarrierTaskContext.resources()["gpu"] looks like
    def __init__(self, *addresses: str) -> None:
        self.addresses = list(addresses)


def _hellos(gpus: list[str], host: str = "a", per_node: int = 0) -> dict[int, dict]:
    """Each rank's hello; with ``per_node``, each names its node (its Spark task) as a rank does in that layout."""
    hellos: dict[int, dict] = {r: {"host": host, "ip": "10.0.0.1", "gpu": g, "scope": "0,1,2,3|*|*"}
                               for r, g in enumerate(gpus)}
    for r in hellos if per_node else ():
        hellos[r]["node"] = r // per_node
    hellos[0]["store_port"] = 7
    return hellos


def _layout(plan: dict, n: int) -> list[tuple]:
    return [(plan[r]["local_rank"], plan[r]["local_world_size"], plan[r]["group_rank"], plan[r]["num_hosts"],
             plan[r]["gpus"]) for r in range(n)]


def test_pysparks_layout_each_task_a_node_seeing_its_own_gpus():
    """TorchDistributor on a cluster runs torchrun per task: with a GPU per task every process is LOCAL_RANK 0 of a
    node of its own and sees its GPU alone (cuda:0); with two per task, LOCAL_RANK 0-1 over the task's two."""
    gpus = ["2", "0", "3", "1"]
    plan = plan_rendezvous(_hellos(gpus, per_node=1), 4)
    assert _layout(plan, 4) == [
        (0, 1, 0, 4, ["2"]), (0, 1, 1, 4, ["0"]), (0, 1, 2, 4, ["3"]), (0, 1, 3, 4, ["1"])]
    assert {plan[r]["host_ranks"] for r in range(4)} == {4}  # the host's cores are shared by all four (threads)
    assert _layout(plan_rendezvous(_hellos(gpus, per_node=2), 4), 4) == [
        (0, 2, 0, 2, ["2", "0"]), (1, 2, 0, 2, ["2", "0"]), (0, 2, 1, 2, ["3", "1"]), (1, 2, 1, 2, ["3", "1"])]
    # %%distribute's own layout stays per host: LOCAL_RANK indexes the host's four
    assert _layout(plan_rendezvous(_hellos(gpus), 4), 4)[3] == (3, 4, 0, 1, ["2", "0", "3", "1"])


def test_a_task_node_never_spans_two_hosts():
    hellos = {**_hellos(["0", "1"], per_node=4), **{r: {"host": "b", "ip": "10.0.0.2", "gpu": g, "scope": "0,1|*|*",
                                                      "node": 0} for r, g in ((2, "0"), (3, "1"))}}
    plan = plan_rendezvous(hellos, 4)
    assert [plan[r]["group_rank"] for r in range(4)] == [0, 0, 1, 1] and plan[0]["num_hosts"] == 2


def test_a_rank_on_a_mig_instance_sees_its_uuid_alone_as_device_0():
    """CUDA shows a process one MIG instance: listing a host's MIG UUIDs and indexing them by LOCAL_RANK fails on
    every rank but the first; each rank is a node of its own, its UUID alone, LOCAL_RANK 0."""
    assert is_mig(MIG_A) and is_mig("MIG-GPU-8f2c/1/0") and not is_mig("GPU-8f2c") and not is_mig("0")
    plan = plan_rendezvous(_hellos([MIG_A, MIG_B, "3"]), 3)
    assert _layout(plan, 3) == [(0, 1, 0, 3, [MIG_A]), (0, 1, 1, 3, [MIG_B]), (0, 1, 2, 3, ["3"])]


def test_a_cuda_rank_sees_its_list_and_pci_bus_order_unless_the_user_chose_one():
    assert device_env(["3", "1"], {}, hip=False) == {"CUDA_VISIBLE_DEVICES": "3,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert device_env([MIG_A], {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}, hip=False) == {"CUDA_VISIBLE_DEVICES": MIG_A}


def test_rocm_reads_and_writes_hips_variables():
    """HIP reads HIP_VISIBLE_DEVICES, else CUDA_VISIBLE_DEVICES, as indexes into what ROCR_VISIBLE_DEVICES leaves."""
    assert visibility_source({}, hip=True) is None and visibility_source({"HIP_VISIBLE_DEVICES": "1"}, False) is None
    env = {"ROCR_VISIBLE_DEVICES": "4,5,6,7", "HIP_VISIBLE_DEVICES": "2,3", "CUDA_VISIBLE_DEVICES": "0"}
    assert visibility_source(env, hip=True) == "HIP_VISIBLE_DEVICES" and visible_gpus(env, hip=True) == ["2", "3"]
    assert visible_gpus(env, hip=False) == ["0"]
    assert device_env(["3"], env, hip=True) == {"CUDA_VISIBLE_DEVICES": "3", "HIP_VISIBLE_DEVICES": "3",
                                                "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}  # ROCR's list left as it is
    slurm = {"ROCR_VISIBLE_DEVICES": "4,5,6,7"}  # Slurm's way: ROCR alone, its ids the ones to hand out
    assert visible_gpus(slurm, hip=True) == ["4", "5", "6", "7"]
    assert device_env(["6"], slurm, hip=True) == {"ROCR_VISIBLE_DEVICES": "6", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    # an executor's own HIP list: Spark's addresses index it, as pyspark reads CUDA_VISIBLE_DEVICES
    assert task_gpus({"gpu": _Gpu("1")}, {"HIP_VISIBLE_DEVICES": "5,7"}, hip=True) == ["7"]


def test_the_preflight_names_every_host_whose_torch_cannot_and_skips_executors_known_fit(monkeypatch):
    monkeypatch.setattr(gpu_preflight, "_fit", set())
    ok = {"host": "gpu-1", "python": "/opt/py/bin/python", "unfit": None, "gpus": ["0", "1"]}
    cpu_only = {"host": "gpu-2", "python": "/opt/py/bin/python", "unfit": "--gpu on gpu-2 (/opt/py/bin/python): "
                "torch 2.13.0+cpu is a CPU-only build", "gpus": []}
    with pytest.raises(LaunchError) as err:
        gpu_preflight.judge([ok, cpu_only, dict(cpu_only)], "the executors")
    text = str(err.value)
    assert "checked on the executors before the run started: 1 host(s) cannot run a GPU rank (gpu-2)" in text
    assert text.count("CPU-only build") == 1
    gpu_preflight.judge([ok], "the executors")  # nothing to refuse
    gpu_preflight._fit.add(("10.0.0.1", "/opt/py/bin/python"))  # what a preflight that reached it remembers
    assert gpu_preflight.known_fit(["10.0.0.1"], "/opt/py/bin/python")
    assert not gpu_preflight.known_fit(["10.0.0.1"], "/usr/bin/python3")  # another Python: ask again
    assert not gpu_preflight.known_fit(["10.0.0.1", "10.0.0.2"], "/opt/py/bin/python")
    assert not gpu_preflight.known_fit([], "/opt/py/bin/python")  # no executors known yet: ask


class _ConnectSession:
    """A Spark Connect client whose server's tasks answer with ``reports`` (what ``host_report`` says there)."""

    def __init__(self, *reports: dict) -> None:
        self.reports = reports

    def range(self, *_: int) -> _ConnectSession:
        return self

    def mapInArrow(self, task: object, schema: str) -> _ConnectSession:
        assert schema == "report string"
        return self

    def collect(self) -> list[dict]:
        return [{"report": json.dumps(r)} for r in self.reports]


def test_spark_connect_asks_the_servers_side_not_the_kernels():
    """This test process's torch is CPU-only and it has no GPU; a Connect server on a local master runs the ranks on
    its own machine, so its torch and its GPUs decide."""
    from jupyter_torchdist.core.options import RunOptions
    from jupyter_torchdist.launchers.connect import ConnectLauncher

    server = {"host": "connect-1", "python": "/srv/py", "unfit": None, "gpus": ["2", "0", "1"]}
    launcher = ConnectLauncher()
    launcher._master = "local[8]"
    launcher._check_gpus(RunOptions(n=2, gpu=True), _ConnectSession(server), local=True)
    assert launcher._local_gpus == ["2", "0"]
    with pytest.raises(LaunchError, match=r"needs 4 GPUs on the Spark Connect server's machine \(connect-1, master "):
        gpu_preflight.server_gpus(_ConnectSession(server), 4, "local[8]")
    cpu_only = {**server, "unfit": "--gpu on connect-1 (/srv/py): torch 2.13.0+cpu is a CPU-only build", "gpus": []}
    with pytest.raises(LaunchError, match=r"checked on the Spark Connect server \(local\[8\]\) before the run"):
        gpu_preflight.server_gpus(_ConnectSession(cpu_only), 1, "local[8]")
