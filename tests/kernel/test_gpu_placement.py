"""A host with several GPUs, without a GPU: every rank gets its own GPU the way PyTorch, Horovod and the frameworks ask
for it (``torch.cuda.set_device(LOCAL_RANK)``, ``hvd.local_rank()``, ``jupyter_torchdist.device()``, Accelerate,
Lightning, the Hugging Face Trainer, DeepSpeed), in a real kernel, on --local, the embedded Spark session, kept ranks,
background runs, TorchDistributor and the command line; Horovod's CPU tensors beside CUDA ones, MIG instances, ROCm's
variables, CUDA_DEVICE_ORDER, and ranks of a Spark worker that initialised CUDA before (issue 49).

The kernel, its Spark workers and its ranks run with a stand-in for CUDA (tests/support/fake_cuda) that keeps the
rules that decide placement: a process sees the devices CUDA_VISIBLE_DEVICES lists when it first touches CUDA, and
``set_device`` past them fails with "invalid device ordinal". The host has 6 GPUs of which the kernel's own
CUDA_VISIBLE_DEVICES shows 4, out of order (5,1,3,0): the ranks may use those 4 and no other. The stand-in's other
rules (an NCCL-only group refuses CPU tensors, one MIG instance per process, HIP's variables, no CUDA in a process
forked after its parent touched it) are listed in its module.
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
                "backend": dist.get_backend(), "local_size": int(os.environ["LOCAL_WORLD_SIZE"]),
                "order": os.environ.get("CUDA_DEVICE_ORDER")}
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


def assert_one_gpu_each(ranks: list[dict], n: int) -> None:
    """Every rank on its own GPU, the one at LOCAL_RANK among the kernel's, NCCL's name on the group."""
    assert [r["rank"] for r in ranks] == list(range(n))
    assert [r["gpu"] for r in ranks] == KERNELS[:n], "each rank its own GPU, in the kernel's order"
    for r in ranks:
        assert r["visible"] == ",".join(map(str, KERNELS[:n])) and r["local_size"] == n
        assert r["device"] == f"cuda:{r['local_rank']}" and r["backend"] == "nccl"
        assert r["order"] == "PCI_BUS_ID", "CUDA's numbers are nvidia-smi's (and the discovery scripts')"


@pytest.mark.parametrize("where", ["--local", ""])
def test_every_rank_takes_its_own_gpu_at_local_rank(kernel, where):
    assert_one_gpu_each(value(kernel, f"%%distribute -n 4 --gpu --all-ranks {where}\nplaced()"), 4)


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
                   "backend": "nccl", "local_size": 3, "order": "PCI_BUS_ID"}, \
        "rank 0's value; every rank ran the tutorial's line"


def test_kept_ranks_and_background_runs_follow_the_rule(kernel):
    first = value(kernel, "%%distribute -n 2 --gpu --local --keep --all-ranks\nplaced()")
    assert_one_gpu_each(first, 2)
    again = value(kernel, "%%distribute --keep --gpu --local --all-ranks\n"
                          "(torch.cuda.current_device(), fakecuda.physical())")
    assert again == [(0, KERNELS[0]), (1, KERNELS[1])], "kept ranks stay on their GPUs from cell to cell"
    assert kernel.execute("%distribute_stop")["status"] == "ok"
    r = kernel.execute("%%distribute -n 2 --gpu --local --background --all-ranks\nplaced()")
    assert r["status"] == "ok", kernel.text(r)
    assert_one_gpu_each(value(kernel, "_.result(timeout=120)"), 2)


def test_horovod_reduces_cpu_tensors_beside_cuda_ones_under_gpu(kernel):
    """Horovod's MNIST example averages its metrics as CPU tensors (``metric_average``) beside CUDA gradients: under
    --gpu the default group takes both, while a group made NCCL-only still refuses CPU tensors as NCCL does."""
    ranks = value(kernel, textwrap.dedent("""\
        %%distribute -n 2 --gpu --local --all-ranks
        import torch.distributed as dist
        import jupyter_torchdist.horovod as hvd
        hvd.init()
        torch.cuda.set_device(hvd.local_rank())

        def metric_average(val, name):  # Horovod's pytorch_mnist.py
            tensor = torch.tensor(val)
            avg_tensor = hvd.allreduce(tensor, name=name)
            return avg_tensor.item()

        on_gpu = hvd.allreduce(torch.ones(2).cuda(), op=hvd.Sum)
        gathered = hvd.allgather(torch.tensor([float(hvd.rank())]))
        sent = hvd.broadcast(torch.tensor([5.0 if hvd.rank() == 0 else 0.0]), root_rank=0, name="b")
        try:
            dist.all_reduce(torch.ones(1), group=dist.new_group(backend="nccl"))
            refused = None
        except RuntimeError as exc:
            refused = str(exc)
        (metric_average(float(hvd.rank()), "avg_loss"), on_gpu.tolist(), gathered.tolist(), sent.item(),
         dist.get_backend(), refused)
    """))
    assert ranks == [(0.5, [2.0, 2.0], [0.0, 1.0], 5.0, "nccl", "No backend type associated with device type cpu")] * 2


def test_horovods_example_trains_under_gpu_from_the_command_line(tmp_path):
    """examples/horovod_train.py as written: its metric_average reduces CPU tensors beside the model's on the GPU."""
    script = str(ROOT / "examples" / "horovod_train.py")
    done = subprocess.run([sys.executable, "-m", "jupyter_torchdist", "-n", "2", "--local", "--gpu", script, "--epochs",
                           "1", "--train-size", "256", "--checkpoint", str(tmp_path / "horovod.pt")],
                          capture_output=True, text=True, env={**os.environ, **ENV}, timeout=180,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and "epoch 1: test loss" in done.stdout, done.stdout + done.stderr


CLI_PLACED = ("import os, torch, fakecuda\ntorch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n"
              "print('placed', os.environ['RANK'], os.environ['LOCAL_RANK'], fakecuda.physical(), "
              "os.environ.get('CUDA_VISIBLE_DEVICES'), os.environ.get('HIP_VISIBLE_DEVICES'), "
              "os.environ.get('CUDA_DEVICE_ORDER'), flush=True)\n")


@pytest.mark.parametrize("case, env, expect", [
    ("MIG instances: each rank its own alone, as device 0; the user's CUDA_DEVICE_ORDER kept",
     {"FAKE_CUDA_GPUS": "1", "FAKE_CUDA_MIG": "3", "CUDA_VISIBLE_DEVICES": "MIG-fake-2,MIG-fake-0",
      "CUDA_DEVICE_ORDER": "FASTEST_FIRST"},
     ["placed 0 0 102 MIG-fake-2 None FASTEST_FIRST", "placed 1 0 100 MIG-fake-0 None FASTEST_FIRST"]),
    ("a ROCm build: HIP_VISIBLE_DEVICES read and set as CUDA's is",
     {"FAKE_CUDA_GPUS": "4", "FAKE_CUDA_HIP": "1", "HIP_VISIBLE_DEVICES": "3,1,2"},
     ["placed 0 0 3 3,1 3,1 PCI_BUS_ID", "placed 1 1 1 3,1 3,1 PCI_BUS_ID"]),
])
def test_mig_instances_and_rocm_from_the_command_line(tmp_path, case, env, expect):
    script = tmp_path / "train.py"
    script.write_text(CLI_PLACED)
    full = {k: v for k, v in {**os.environ, **ENV}.items() if k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
    full.update(env)
    done = subprocess.run([sys.executable, "-m", "jupyter_torchdist", "-n", "2", "--local", "--gpu", str(script)],
                          capture_output=True, text=True, env=full, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, case + "\n" + done.stdout + done.stderr
    for rank, line in enumerate(expect):
        assert f"[rank {rank}] {line}" in done.stdout, case + "\n" + done.stdout


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


def test_a_spark_worker_that_initialised_cuda_spawns_its_ranks(kernel):
    """A task that used the GPU (a GPU UDF's way) leaves CUDA initialised in its reused Python worker, and a rank forked
    from it could not use CUDA ("Cannot re-initialize CUDA in forked subprocess"): its ranks are spawned instead.
    Last in this module: the embedded session's workers stay so."""
    touched = value(kernel, textwrap.dedent("""\
        import time
        sc = jt.spark_session().sparkContext
        slots = sc.defaultParallelism
        sc.parallelize(range(slots), slots).map(
            lambda _: (time.sleep(1), __import__("torch").cuda.init(), __import__("torch").cuda.is_initialized())[-1]
        ).collect()
    """))
    assert touched and all(touched), touched
    assert_one_gpu_each(value(kernel, "%%distribute -n 2 --gpu --all-ranks\nplaced()"), 2)
