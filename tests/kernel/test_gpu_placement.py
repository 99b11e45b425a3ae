"""A host with several GPUs, without a GPU: every rank gets its own GPU the way PyTorch, Horovod and the frameworks ask
for it (``torch.cuda.set_device(LOCAL_RANK)``, ``hvd.local_rank()``, ``jupyter_torchdist.device()``, Accelerate,
Lightning, the Hugging Face Trainer, DeepSpeed), in a real kernel, on --local, the embedded Spark session, kept ranks,
background runs, TorchDistributor and the command line.

The kernel, its Spark workers and its ranks run with a stand-in for CUDA (tests/support/fake_cuda) that keeps the
rules that decide placement: a process sees the devices CUDA_VISIBLE_DEVICES lists when it first touches CUDA, and
``set_device`` past them fails with "invalid device ordinal". The host has 6 GPUs of which the kernel's own
CUDA_VISIBLE_DEVICES shows 4, out of order (5,1,3,0): the ranks may use those 4 and no other.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap

import pytest

from ..support import ROOT
from ..support.kernel import Kernel, loaded_kernel

pytestmark = pytest.mark.spark

FAKE = ROOT / "tests" / "support" / "fake_cuda"
ENV = {"FAKE_CUDA_GPUS": "6", "CUDA_VISIBLE_DEVICES": "5,1,3,0",
       "PYTHONPATH": os.pathsep.join(filter(None, [str(FAKE), os.environ.get("PYTHONPATH")]))}
KERNELS = [5, 1, 3, 0]  # the physical GPUs the kernel shows, in its order

SETUP = textwrap.dedent("""\
    import os, torch, fakecuda
    import jupyter_torchdist as jt

    def placed():
        import os, torch, torch.distributed as dist, fakecuda
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))  # the PyTorch DDP tutorial's line
        return {"rank": dist.get_rank(), "local_rank": int(os.environ["LOCAL_RANK"]), "gpu": fakecuda.physical(),
                "device": str(jt.device()), "visible": os.environ["CUDA_VISIBLE_DEVICES"],
                "backend": dist.get_backend(), "local_size": int(os.environ["LOCAL_WORLD_SIZE"])}
""")


@pytest.fixture(scope="module")
def kernel():
    with loaded_kernel(ENV, setup=SETUP) as k:
        yield k


def value(k: Kernel, code: str, timeout: float = 240) -> object:
    r = k.execute(code, timeout=timeout)
    assert r["status"] == "ok", k.text(r)
    results = [o for o in r["outputs"] if o["output_type"] == "execute_result"]
    assert results, k.text(r)
    return ast.literal_eval(results[-1]["data"]["text/plain"])


def check_one_gpu_each(ranks: list[dict], n: int) -> None:
    """Every rank on its own GPU, the one at LOCAL_RANK among the kernel's, NCCL's name on the group."""
    assert [r["rank"] for r in ranks] == list(range(n))
    assert [r["gpu"] for r in ranks] == KERNELS[:n], "each rank its own GPU, in the kernel's order"
    for r in ranks:
        assert r["visible"] == ",".join(map(str, KERNELS[:n])) and r["local_size"] == n
        assert r["device"] == f"cuda:{r['local_rank']}" and r["backend"] == "nccl"


@pytest.mark.parametrize("where", ["--local", ""])
def test_every_rank_takes_its_own_gpu_at_local_rank(kernel, where):
    check_one_gpu_each(value(kernel, f"%%distribute -n 4 --gpu --all-ranks {where}\nplaced()"), 4)


def test_horovod_local_rank_picks_the_gpu(kernel):
    ranks = value(kernel, textwrap.dedent("""\
        %%distribute -n 4 --gpu --local --all-ranks
        import jupyter_torchdist.horovod as hvd
        hvd.init()
        torch.cuda.set_device(hvd.local_rank())  # Horovod's own line
        (hvd.local_rank(), hvd.local_size(), fakecuda.physical())
    """))
    assert ranks == [(i, 4, gpu) for i, gpu in enumerate(KERNELS)]


def test_the_frameworks_choose_the_ranks_own_gpu(kernel):
    """Each framework's own device choice, as far as it goes without CUDA kernels."""
    ranks = value(kernel, textwrap.dedent("""\
        %%distribute -n 2 --gpu --local --all-ranks
        import tempfile
        from accelerate import Accelerator
        import lightning as L
        from transformers import TrainingArguments
        from deepspeed.accelerator import get_accelerator
        trainer = L.Trainer(accelerator="gpu", devices="auto", strategy="ddp", logger=False, enable_checkpointing=False)
        trainer.strategy.setup_environment()
        {"accelerate": str(Accelerator().device), "lightning": str(trainer.strategy.root_device),
         "transformers": str(TrainingArguments(output_dir=tempfile.mkdtemp()).device),
         "deepspeed": get_accelerator().current_device_name(), "gpu": fakecuda.physical()}
    """), timeout=300)
    for i, r in enumerate(ranks):
        assert r == {"accelerate": f"cuda:{i}", "lightning": f"cuda:{i}", "transformers": f"cuda:{i}",
                     "deepspeed": f"cuda:{i}", "gpu": KERNELS[i]}


def test_torchdistributor_local_mode_places_ranks_as_pyspark_does(kernel):
    """pyspark's runs torchrun on the driver's GPUs; ours gives the same: cuda:LOCAL_RANK code passes."""
    got = value(kernel, "from jupyter_torchdist import TorchDistributor\n"
                        "TorchDistributor(num_processes=3, local_mode=True, use_gpu=True).run(placed)")
    assert got == {"rank": 0, "local_rank": 0, "gpu": KERNELS[0], "device": "cuda:0", "visible": "5,1,3",
                   "backend": "nccl", "local_size": 3}, "rank 0's value; every rank ran the tutorial's line"


def test_kept_ranks_and_background_runs_follow_the_rule(kernel):
    first = value(kernel, "%%distribute -n 2 --gpu --local --keep --all-ranks\nplaced()")
    check_one_gpu_each(first, 2)
    again = value(kernel, "%%distribute --keep --gpu --local --all-ranks\n"
                          "(torch.cuda.current_device(), fakecuda.physical())")
    assert again == [(0, KERNELS[0]), (1, KERNELS[1])], "kept ranks stay on their GPUs from cell to cell"
    assert kernel.execute("%distribute_stop")["status"] == "ok"
    r = kernel.execute("%%distribute -n 2 --gpu --local --background --all-ranks\nplaced()")
    assert r["status"] == "ok", kernel.text(r)
    check_one_gpu_each(value(kernel, "_.result(timeout=120)"), 2)


def test_the_command_line_places_ranks_the_same_way(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import os, torch, fakecuda\ntorch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n"
                      "print('rank', os.environ['RANK'], 'gpu', fakecuda.physical(), flush=True)\n")
    env = {**os.environ, **ENV}
    done = subprocess.run([sys.executable, "-m", "jupyter_torchdist", "-n", "3", "--local", "--gpu", str(script)],
                          capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in range(3):
        assert f"[rank {rank}] rank {rank} gpu {KERNELS[rank]}" in done.stdout, done.stdout


def test_more_ranks_than_the_kernels_gpus_are_refused_before_anything_starts(kernel):
    r = kernel.execute("%%distribute -n 5 --gpu --local\n1")
    assert r["status"] == "error" and "-n 5 needs 5 GPUs" in kernel.text(r)
    assert "CUDA_VISIBLE_DEVICES=5,1,3,0" in kernel.text(r)
