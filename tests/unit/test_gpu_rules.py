"""Which GPU each rank gets, with fake Spark resources and environments (no GPU needed)."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

import jupyter_torchdist as jt
from jupyter_torchdist.errors import LaunchError
from jupyter_torchdist.gpus import NoGpuError, parse_visible_devices, pick_gpu, visible_gpus


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


def test_cluster_task_uses_its_own_resource_whatever_its_rank():
    res = {"gpu": FakeResource("gpu", ["3", "5"])}
    assert pick_gpu(0, res, None) == "3"
    assert pick_gpu(7, res, ["0", "1"]) == "3"  # the scheduler's choice wins over the driver's list


def test_local_master_hands_out_the_drivers_gpus_by_rank():
    gpus = ["2", "GPU-abc", "0"]
    assert [pick_gpu(r, {}, gpus) for r in range(3)] == gpus
    assert pick_gpu(1, {"gpu": FakeResource("gpu", [])}, gpus) == "GPU-abc"  # empty resource: by rank


def test_no_gpu_for_a_rank_is_an_error_not_a_shared_gpu():
    with pytest.raises(NoGpuError, match="only 2 visible"):
        pick_gpu(2, None, ["0", "1"])
    with pytest.raises(NoGpuError, match="spark.task.resource.gpu.amount"):
        pick_gpu(0, {}, None)


@pytest.mark.parametrize("value", ["", "-1"])
def test_local_gpu_run_is_refused_when_cuda_visible_devices_hides_every_gpu(monkeypatch, value):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    with pytest.raises(LaunchError, match="shows 0"):
        jt.run(len, [], n=1, local=True, gpu=True)


def test_local_gpu_run_needs_one_gpu_per_rank(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(LaunchError, match="-n 3 needs 3 GPUs, but this machine shows 2"):
        jt.run(len, [], n=3, local=True, gpu=True)

