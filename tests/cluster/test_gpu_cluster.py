"""A standalone cluster whose one worker has 4 GPUs, scheduled by Spark (a discovery script lists them, as pyspark's
own TorchDistributor tests declare GPUs) in two executors of 2. ``%%distribute --gpu`` gives every rank its own GPU
through LOCAL_RANK (a host's ranks see the host's GPUs, as torchrun on that host); a task that holds 2 GPUs runs a
rank on each. Our TorchDistributor keeps pyspark's own layout instead (a node per Spark task), and pyspark's
TorchDistributor runs beside it on the same cluster: code using ``cuda:0``, code using ``LOCAL_RANK`` and Lightning's
``Trainer(accelerator="gpu", devices=1, num_nodes=N)`` land on the same GPUs under both, and in local mode both draw
the same of the driver's GPUs. A session whose executors' torch is CPU-only is refused before any rank starts.

The executors' Python processes (and the kernel's, for local mode) run with the CUDA stand-in of
tests/support/fake_cuda (see tests/kernel/test_gpu_placement.py): ``set_device`` past the devices a process sees
fails as CUDA's does. One cluster for the module.
"""
from __future__ import annotations

import ast
import os
import socket
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

    def pyspark_code():
        """Code written for pyspark's TorchDistributor: Lightning's recipe for it, set up as fit() sets it up (its
        own group, its device), then the GPU at cuda:LOCAL_RANK, then the one at cuda:0."""
        import os, torch, torch.distributed as dist, fakecuda
        import lightning as L
        world = int(os.environ["WORLD_SIZE"])
        trainer = L.Trainer(accelerator="gpu", devices=1, num_nodes=world, strategy="ddp", logger=False,
                            enable_checkpointing=False, enable_progress_bar=False)
        trainer.strategy.setup_environment()
        lightning = (str(trainer.strategy.root_device), fakecuda.physical(), trainer.global_rank, trainer.node_rank)
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        local_rank_gpu = fakecuda.physical()
        torch.cuda.set_device(0)
        mine = {"rank": dist.get_rank(), "local_rank": int(os.environ["LOCAL_RANK"]),
                "node": int(os.environ["GROUP_RANK"]), "visible": os.environ["CUDA_VISIBLE_DEVICES"],
                "cuda0": fakecuda.physical(),
                "local_rank_gpu": local_rank_gpu, "lightning": lightning}
        every = [None] * world
        dist.all_gather_object(every, mine, group=dist.new_group(backend="gloo"))
        return every

    def pyspark_reference(run):
        """pyspark's own class, with one more try when torchrun's agent itself crashed (seen here: it is not what
        is compared)."""
        try:
            return run()
        except Exception as exc:
            if "failed with return code" not in str(exc):  # pyspark's words for a torchrun that failed
                raise
            return run()
''')
GPUS = {"spark.executor.resource.gpu.amount": "2", "spark.executor.cores": "2", "spark.cores.max": "4",
        "spark.executor.memory": "512m"}


@pytest.fixture(scope="module")
def gpu_host(tmp_path_factory):
    c = start(tmp_path_factory.mktemp("spark-4-gpus"), workers=1, cores=4, gpus=4, memory="2g")
    try:
        yield c
    finally:
        survivors = stop(c)
        assert not survivors, f"cluster processes survived the teardown: {survivors}"


def _kernel(c, per_task: int, fake_executors: bool = True) -> Kernel:
    """A notebook on the cluster; its executors (and the kernel itself, which runs local mode's ranks) have the CUDA
    stand-in unless ``fake_executors`` is False (their torch is then the CPU-only build it is)."""
    script = str(c.workdir / "gpus.sh")
    conf = {**GPUS, "spark.task.resource.gpu.amount": str(per_task),
            "spark.executor.resource.gpu.discoveryScript": script,
            "spark.driver.resource.gpu.amount": "4", "spark.driver.resource.gpu.discoveryScript": script,
            "spark.executorEnv.PYTHONPATH": f"{ROOT}{os.pathsep}{FAKE}" if fake_executors else str(ROOT)}
    if fake_executors:
        conf["spark.executorEnv.FAKE_CUDA_GPUS"] = "4"
    env = {"FAKE_CUDA_GPUS": "4", "PYTHONPATH": os.pathsep.join(filter(None, [FAKE, os.environ.get("PYTHONPATH")]))}
    kernel = kernel_on(c, conf, name=f"gpus-{per_task}-per-task", env=env)
    r = kernel.execute(TUTORIAL)
    assert r["status"] == "ok", kernel.text(r)
    return kernel


def _value(kernel: Kernel, code: str, timeout: float = 240) -> object:
    r = kernel.execute(code, timeout=timeout)
    assert r["status"] == "ok", kernel.text(r)
    results = [o for o in r["outputs"] if o["output_type"] == "execute_result"]
    assert results, kernel.text(r)
    return ast.literal_eval(results[-1]["data"]["text/plain"])


def _one_gpu_each(every: list) -> None:
    """Ranks 0-3 on GPUs 0-3 of the host, each the one at its LOCAL_RANK of the GPUs it sees."""
    assert [r[0] for r in every] == [0, 1, 2, 3], every
    assert sorted(r[2] for r in every) == [0, 1, 2, 3], f"each rank its own GPU: {every}"
    for _, local, gpu, visible in every:
        assert visible.split(",")[local] == str(gpu), every


def _pysparks_layout(every: list[dict]) -> list[tuple]:
    """What code written for pyspark's class sees, each rank's own GPU written as "own": a node per task, its GPU
    alone at cuda:0, where LOCAL_RANK and Lightning put it too."""
    assert sorted(int(r["visible"]) for r in every) == [0, 1, 2, 3], f"each rank its own GPU: {every}"
    own = [int(r["visible"]) for r in every]
    return [(r["rank"], r["local_rank"], r["node"], r["cuda0"] == g, r["local_rank_gpu"] == g, r["lightning"][0],
             r["lightning"][1] == g, r["lightning"][2:]) for r, g in zip(every, own)]


def test_four_ranks_in_two_executors_of_two_gpus_each_and_pysparks_layout_under_both_classes(gpu_host):
    kernel = _kernel(gpu_host, per_task=1)
    try:
        every = _value(kernel, "%%distribute -n 4 --gpu\ntutorial()")
        _one_gpu_each(every)
        assert sorted(r[1] for r in every) == [0, 1, 2, 3], "%%distribute: one host, local ranks 0-3"
        assert all(sorted(r[3].split(",")) == ["0", "1", "2", "3"] for r in every), "each sees the host's four"
        ours = _value(kernel, "from jupyter_torchdist import TorchDistributor\n"
                              "TorchDistributor(num_processes=4, local_mode=False, use_gpu=True).run(pyspark_code)")
        theirs = _value(kernel, "from pyspark.ml.torch.distributor import TorchDistributor as Pyspark\n"
                                "pyspark_reference(lambda: Pyspark(num_processes=4, local_mode=False, use_gpu=True)"
                                ".run(pyspark_code))", timeout=400)
        expected = [(r, 0, r, True, True, "cuda:0", True, (r, r)) for r in range(4)]
        assert _pysparks_layout(theirs) == expected, theirs
        assert _pysparks_layout(ours) == expected, f"ours differs from pyspark's {theirs}: {ours}"
        local = ("(TorchDistributor(num_processes=2, local_mode=True, use_gpu=True).run(tutorial), pyspark_reference("
                 "lambda: Pyspark(num_processes=2, local_mode=True, use_gpu=True).run(tutorial)))")
        ours_local, theirs_local = _value(kernel, local, timeout=300)
        assert ours_local == theirs_local, "the same 2 of the driver's 4 GPUs, drawn as pyspark draws them"
        assert [r[1] for r in ours_local] == [0, 1] and len({r[2] for r in ours_local}) == 2, ours_local
    finally:
        kernel.shutdown()


def test_a_task_holding_two_gpus_runs_a_rank_on_each(gpu_host):
    kernel = _kernel(gpu_host, per_task=2)
    try:
        every = _value(kernel, "%%distribute -n 4 --gpu\ntutorial()")
        _one_gpu_each(every)
        assert all(sorted(r[3].split(",")) == ["0", "1", "2", "3"] for r in every), "each sees the host's four"
        r = kernel.execute("%%distribute -n 3 --gpu\n1")
        assert r["status"] == "error" and "-n must be a multiple of 2 (asked 3)" in kernel.text(r), kernel.text(r)
        ours = _value(kernel, "from jupyter_torchdist import TorchDistributor\n"
                              "TorchDistributor(num_processes=4, local_mode=False, use_gpu=True).run(tutorial)")
        _one_gpu_each(ours)  # pyspark's torchrun --nproc_per_node=2 per task: LOCAL_RANK 0-1 over the task's two
        assert [r[1] for r in ours] == [0, 1, 0, 1] and all(len(r[3].split(",")) == 2 for r in ours), ours
        assert {r[3] for r in ours[:2]} != {r[3] for r in ours[2:]}, f"each task sees its own two GPUs: {ours}"
    finally:
        kernel.shutdown()


def test_executors_whose_torch_is_cpu_only_are_refused_by_name_before_any_rank_starts(gpu_host):
    kernel = _kernel(gpu_host, per_task=1, fake_executors=False)
    try:
        r = kernel.execute("%%distribute -n 2 --gpu\nimport time; time.sleep(600)", timeout=120)
        text = kernel.text(r)
        assert r["status"] == "error", text
        assert f"checked on the executors before the run started: 1 host(s) cannot run a GPU rank " \
               f"({socket.gethostname()})" in text and "CPU-only build" in text, text
        assert "rank 0" not in text and "rank 1" not in text, f"no rank started: {text}"
    finally:
        kernel.shutdown()
