"""A standalone cluster whose one worker has 4 GPUs, scheduled by Spark (a discovery script lists them, as pyspark's
own TorchDistributor tests declare GPUs) in two executors of 2: every rank gets its own GPU through LOCAL_RANK, with
%%distribute and with our TorchDistributor (pyspark's passes there too: benchmarks/bench_gpu_placement.py runs both
side by side; its torchrun agents crashed in one try of three here, too flaky for CI); a task that holds 2 GPUs runs a
rank on each.

The executors' Python processes run with the CUDA stand-in of tests/support/fake_cuda (see
tests/kernel/test_gpu_placement.py): ``set_device`` past the devices a process sees fails as CUDA's does.
"""
from __future__ import annotations

import ast
import os
import textwrap

import pytest

from ..support import ROOT
from ..support.cluster import kernel_on, start, stop
from ..support.kernel import Kernel

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

FAKE = str(ROOT / "tests" / "support" / "fake_cuda")
TUTORIAL = textwrap.dedent('''\
    def tutorial():
        """The DDP tutorial's way: the group from the environment, the GPU from LOCAL_RANK."""
        import os, torch, torch.distributed as dist, fakecuda
        if not dist.is_initialized():
            dist.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        every = [None] * dist.get_world_size()
        mine = (dist.get_rank(), int(os.environ["LOCAL_RANK"]), fakecuda.physical(), os.environ["CUDA_VISIBLE_DEVICES"])
        dist.all_gather_object(every, mine, group=dist.new_group(backend="gloo"))
        return every
''')


@pytest.fixture(scope="module")
def gpu_host(tmp_path_factory):
    c = start(tmp_path_factory.mktemp("spark-4-gpus"), workers=1, cores=4, gpus=4, memory="2g")
    try:
        yield c
    finally:
        survivors = stop(c)
        assert not survivors, f"cluster processes survived the teardown: {survivors}"


def _kernel(c, per_task: int) -> Kernel:
    conf = {"spark.cores.max": "4", "spark.executor.cores": "2", "spark.executor.memory": "512m",
            "spark.executor.resource.gpu.amount": "2", "spark.task.resource.gpu.amount": str(per_task),
            "spark.executor.resource.gpu.discoveryScript": str(c.workdir / "gpus.sh"),
            "spark.executorEnv.FAKE_CUDA_GPUS": "4", "spark.executorEnv.PYTHONPATH": f"{ROOT}{os.pathsep}{FAKE}"}
    kernel = kernel_on(c, conf, name=f"gpus-{per_task}-per-task")
    r = kernel.execute(TUTORIAL)
    assert r["status"] == "ok", kernel.text(r)
    return kernel


def _value(kernel: Kernel, code: str) -> object:
    r = kernel.execute(code, timeout=240)
    assert r["status"] == "ok", kernel.text(r)
    results = [o for o in r["outputs"] if o["output_type"] == "execute_result"]
    assert results, kernel.text(r)
    return ast.literal_eval(results[-1]["data"]["text/plain"])


def _one_gpu_each(every: list) -> None:
    """Ranks 0-3 on GPUs 0-3 of the host, each the one at its LOCAL_RANK of the host's four it sees."""
    assert [r[0] for r in every] == [0, 1, 2, 3], every
    assert sorted(r[2] for r in every) == [0, 1, 2, 3], f"each rank its own GPU: {every}"
    for _, local, gpu, visible in every:
        assert visible.split(",")[local] == str(gpu) and sorted(visible.split(",")) == ["0", "1", "2", "3"], every


def test_four_ranks_in_two_executors_of_two_gpus_each_take_their_own(gpu_host):
    kernel = _kernel(gpu_host, per_task=1)
    try:
        every = _value(kernel, "%%distribute -n 4 --gpu\ntutorial()")
        _one_gpu_each(every)
        assert sorted(r[1] for r in every) == [0, 1, 2, 3], "one host: local ranks 0-3"
        ours = _value(kernel, "from jupyter_torchdist import TorchDistributor\n"
                              "TorchDistributor(num_processes=4, local_mode=False, use_gpu=True).run(tutorial)")
        _one_gpu_each(ours)
    finally:
        kernel.shutdown()


def test_a_task_holding_two_gpus_runs_a_rank_on_each(gpu_host):
    kernel = _kernel(gpu_host, per_task=2)
    try:
        _one_gpu_each(_value(kernel, "%%distribute -n 4 --gpu\ntutorial()"))
        r = kernel.execute("%%distribute -n 3 --gpu\n1")
        assert r["status"] == "error" and "-n must be a multiple of 2 (asked 3)" in kernel.text(r), kernel.text(r)
    finally:
        kernel.shutdown()
