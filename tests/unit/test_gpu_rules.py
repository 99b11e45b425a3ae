"""Which GPU each rank gets, with fake Spark resources and environments (no GPU needed)."""
from __future__ import annotations

import socket
from dataclasses import dataclass

import pytest

import jupyter_torchdist as jt
from jupyter_torchdist.core import gpus
from jupyter_torchdist.core.errors import LaunchError
from jupyter_torchdist.core.gpus import (NoGpuError, cuda_unfit, device_scope, gpus_per_task, parse_visible_devices,
                                    placements, task_gpus, visible_gpus)


@dataclass
class FakeResource:  # what BarrierTaskContext.resources()["gpu"] looks like
    name: str
    addresses: list[str]


@pytest.mark.parametrize("value, expect", [
    ("", []),
    ("-1", []),
    ("0", ["0"]),
    ("1,0", ["1", "0"]),
    (" 2 , 3 ", ["2", "3"]),
    ("0,-1,1", ["0"]),          # CUDA stops at the first invalid entry
    ("0,,1", ["0"]),
    ("GPU-8f2c,GPU-11aa", ["GPU-8f2c", "GPU-11aa"]),
    ("MIG-4c1e", ["MIG-4c1e"]),
])
def test_cuda_visible_devices_is_read_as_cuda_reads_it(value, expect):
    assert parse_visible_devices(value) == expect
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": value}) == expect


def test_without_cuda_visible_devices_torch_counts():
    import torch

    assert visible_gpus({}) == [str(i) for i in range(torch.cuda.device_count())]


def test_a_cluster_task_takes_the_gpus_spark_gave_it_whatever_its_rank():
    res = {"gpu": FakeResource("gpu", ["3", "5"])}
    assert task_gpus(res, {}) == ["3", "5"]
    assert placements(6, 2, task_gpus(res, {}), ["0", "1"], 8) == [(6, "3"), (7, "5")]  # the scheduler's choice wins
    assert placements(7, 1, ["3", "5"], None, 8) == [(7, "3")]


def test_an_executor_with_its_own_cuda_visible_devices_reads_addresses_as_indexes_into_it_as_pyspark_does():
    res = {"gpu": FakeResource("gpu", ["1", "GPU-abc"])}
    assert task_gpus(res, {"CUDA_VISIBLE_DEVICES": "4,6"}) == ["6", "GPU-abc"]
    with pytest.raises(NoGpuError, match="GPU 2, but its executor runs with CUDA_VISIBLE_DEVICES=4,6"):
        task_gpus({"gpu": FakeResource("gpu", ["2"])}, {"CUDA_VISIBLE_DEVICES": "4,6"})


def test_a_local_master_hands_out_the_kernels_gpus_by_rank():
    gpus = ["2", "GPU-abc", "0"]
    assert placements(0, 3, [], gpus, 3) == list(enumerate(gpus))
    assert placements(1, 1, task_gpus({"gpu": FakeResource("gpu", [])}, {}), gpus, 3) == [(1, "GPU-abc")]


def test_no_gpu_for_a_rank_is_an_error_not_a_shared_gpu():
    with pytest.raises(NoGpuError, match="only 2 visible"):
        placements(2, 1, [], ["0", "1"], 3)
    with pytest.raises(NoGpuError, match="spark.task.resource.gpu.amount"):
        placements(0, 1, [], None, 1)
    with pytest.raises(NoGpuError, match="runs 2 ranks but Spark gave it 1 GPUs"):
        placements(0, 2, ["0"], None, 2)


@pytest.mark.parametrize("value, expect", [
    (None, "needs GPU scheduling"),
    ("0", "needs GPU scheduling"),
    ("0.5", "shares each GPU between tasks, but NCCL runs one rank per GPU"),
    ("1.5", "not a whole number"),
    ("two", "not a number of GPUs"),
])
def test_task_gpu_amounts_that_cannot_give_a_rank_a_gpu_of_its_own_are_refused(value, expect):
    with pytest.raises(LaunchError, match=expect):
        gpus_per_task(value)


def test_a_task_with_several_gpus_runs_a_rank_on_each():
    assert gpus_per_task("1") == 1 and gpus_per_task("4") == 4 and gpus_per_task("2.0") == 2


def test_the_device_scope_lists_the_gpus_this_process_can_open(tmp_path):
    for name in ("nvidia0", "nvidia10", "nvidia2", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).write_text("")
    (tmp_path / "nvidia3").mkdir()  # cannot be opened for writing: a device the devices cgroup denies
    assert device_scope({}, str(tmp_path)) == "0,2,10|*|*"
    assert device_scope({"CUDA_VISIBLE_DEVICES": "1", "NVIDIA_VISIBLE_DEVICES": "GPU-x"}, str(tmp_path / "none")) \
        == "|1|GPU-x"


def test_a_cpu_only_torch_is_named_with_the_host_and_the_fix():
    why = cuda_unfit()  # this machine's torch is the CPU build
    assert why is not None and socket.gethostname() in why and "CPU-only build" in why and "drop --gpu" in why


@pytest.fixture
def cuda_build(monkeypatch):
    """As if this torch were a CUDA build with NCCL (the count of GPUs is checked after the build)."""
    monkeypatch.setattr(gpus, "cuda_unfit", lambda: None)


@pytest.mark.parametrize("value", ["", "-1"])
def test_local_gpu_run_is_refused_when_cuda_visible_devices_hides_every_gpu(monkeypatch, cuda_build, value):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    with pytest.raises(LaunchError, match="shows 0"):
        jt.run(len, [], n=1, local=True, gpu=True)


def test_local_gpu_run_needs_one_gpu_per_rank(monkeypatch, cuda_build):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(LaunchError, match=r"-n 3 needs 3 GPUs, but this machine \(\S+\) shows 2"):
        jt.run(len, [], n=3, local=True, gpu=True)



def test_a_rank_whose_gpu_cuda_cannot_open_says_so_naming_the_host(monkeypatch):
    """Instead of CUDA's "invalid device ordinal": which device, what CUDA_VISIBLE_DEVICES lists, where to look."""
    import torch

    from jupyter_torchdist.rank.group import _use_gpu

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    with pytest.raises(RuntimeError, match=f"--gpu on {socket.gethostname()}: this rank's GPU is device 3 of "
                                           r"CUDA_VISIBLE_DEVICES=0,1,2,3, but CUDA opens only 2 of them"):
        _use_gpu("cuda:3")
