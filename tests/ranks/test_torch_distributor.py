"""TorchDistributor: pyspark's constructor and run() semantics, on our local and Spark launchers."""
from __future__ import annotations

import sys

import cloudpickle
import pytest

from jupyter_torchdist import TorchDistributor
from jupyter_torchdist.errors import LaunchError, RunFailed

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def train(lr, batch_size=8, *, epochs=1):
    """Written for pyspark's TorchDistributor: initialises the group itself, returns from every rank."""
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(epochs * 3):
        g = torch.Generator().manual_seed(100 * dist.get_rank() + step)
        x = torch.randn(batch_size, 4, generator=g)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"rank {dist.get_rank()} done")
    weights = [round(w, 5) for w in model.module.weight.detach().flatten().tolist()]
    return {"rank": int(os.environ["RANK"]), "world": int(os.environ["WORLD_SIZE"]), "lr": lr,
            "batch_size": batch_size, "epochs": epochs, "weights": weights}


def fail_on_rank_1():
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise ArithmeticError("rank one diverged")
    dist.barrier()


SCRIPT = '''\
import sys, torch.distributed as dist
dist.init_process_group("gloo")
print("script", dist.get_rank(), sys.argv[1:])
'''


def test_function_returns_rank_0s_value_with_args_and_kwargs(capsys):
    value = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(train, 0.1, 16, epochs=2)
    assert value["rank"] == 0 and value["world"] == 2
    assert (value["lr"], value["batch_size"], value["epochs"]) == (0.1, 16, 2)
    out = capsys.readouterr().out  # outside a notebook the run is shown as text, every rank's lines prefixed
    assert "[rank 0] rank 0 done" in out and "[rank 1] rank 1 done" in out


def test_script_path_gets_its_args_as_strings_and_returns_none(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    dist = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False)
    assert dist.run(str(script), "--lr", 0.5, "--flag") is None
    logs = dist.last_result.logs
    assert ("stdout", "script 1 ['--lr', '0.5', '--flag']") in logs[1]
    with pytest.raises(ValueError, match="does not support key-word"):
        dist.run(str(script), lr=0.5)


def test_failure_names_the_rank():
    with pytest.raises(RunFailed) as info:
        TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(fail_on_rank_1)
    assert info.value.rank == 1 and "ArithmeticError: rank one diverged" in str(info.value)


@pytest.mark.parametrize("n", [0, -1, 1.5, True])
def test_num_processes_must_be_a_positive_integer(n):
    with pytest.raises(ValueError, match="num_processes has to be a positive integer"):
        TorchDistributor(num_processes=n)


def test_use_gpu_defaults_to_true_like_pyspark_and_says_how_to_turn_it_off(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    dist = TorchDistributor()
    assert (dist.num_processes, dist.local_mode, dist.use_gpu) == (1, True, True)
    with pytest.raises(LaunchError, match="use_gpu=False"):
        dist.run(train, 0.1)


def test_train_object_must_be_callable_or_a_path():
    with pytest.raises(TypeError, match="function or a path"):
        TorchDistributor(use_gpu=False).run(42)


@pytest.mark.spark
def test_local_mode_false_runs_as_spark_tasks(spark):
    dist = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False)
    value = dist.run(train, 0.2)
    assert value["rank"] == 0 and value["lr"] == 0.2
    assert dist.last_result.state.backend.startswith("spark local[")


@pytest.mark.spark
def test_same_function_same_result_as_pysparks_torch_distributor(spark):
    """The switch is one import: pyspark's own TorchDistributor gives the same value for the same code."""
    from pyspark.ml.torch.distributor import TorchDistributor as PySparkTorchDistributor

    ours = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(train, 0.05, epochs=2)
    theirs = PySparkTorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(train, 0.05, epochs=2)
    assert ours["rank"] == 0  # always rank 0's value: pyspark's local mode has every rank write one output
    # file, so its value is whichever rank wrote last (seen: rank 1's). DDP makes the rest equal on all ranks.
    assert {k: v for k, v in ours.items() if k != "rank"} == {k: v for k, v in theirs.items() if k != "rank"}
