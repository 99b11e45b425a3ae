"""Horovod elastic on real ranks: examples/horovod_elastic.py (Horovod's own pattern) with a rank SIGKILLed mid-epoch
resumes from the last state.commit() and ends with exactly the weights of an uninterrupted run (no sample trained
twice or skipped); horovod.spark.run_elastic on Spark tasks does the same for a function, and its reset callbacks
run on the restarted attempt only."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import cloudpickle
import pytest
import torch

from jupyter_torchdist.core.errors import RunFailed
from jupyter_torchdist.horovod import spark as hvd_spark

from .. import support
from ..support.cli import cli

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the ranks cannot import the tests package

EXAMPLE = support.ROOT / "examples" / "horovod_elastic.py"
KILL = """\
        if hvd.rank() == 1 and state.epoch == 1 and batch_idx == 5 and not os.path.exists({marker!r}):
            open({marker!r}, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)  # a lost rank: mid-epoch, three batches after a commit
"""


def _with_a_kill(tmp_path: Path) -> Path:
    """The example with rank 1 killed once, mid-epoch 1, right after an optimizer step."""
    text = EXAMPLE.read_text()
    step = "        optimizer.step()\n"
    assert text.count(step) == 1
    script = tmp_path / "killed.py"
    script.write_text("import os, signal\n" + text.replace(step, step + KILL.format(marker=str(tmp_path / "killed"))))
    return script


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)


def test_a_killed_rank_resumes_the_horovod_elastic_example_exactly(tmp_path):
    plain = cli("-np", "2", "--local", "python", str(EXAMPLE), "--out", str(tmp_path / "plain.pt"))
    assert plain.returncode == 0, plain.stderr
    killed = cli("-np", "2", "--local", "--max-restarts", "1", "python", str(_with_a_kill(tmp_path)),
                 "--out", str(tmp_path / "killed.pt"))
    assert killed.returncode == 0, killed.stdout + killed.stderr
    assert (tmp_path / "killed").exists(), "the rank was never killed"
    assert "attempt 1 of 2 failed: rank 1" in killed.stdout and "SIGKILL" in killed.stdout, killed.stdout
    assert "restarted from step 12" in killed.stdout  # epoch 0: 8 commits + its end; epoch 1: batches 0, 2, 4
    a, b = _weights(tmp_path / "plain.pt"), _weights(tmp_path / "killed.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_without_restarts_a_lost_rank_fails_the_run_as_any_run(tmp_path):
    out = cli("-np", "2", "--local", "python", str(_with_a_kill(tmp_path)))
    assert out.returncode == 1 and "rank 1" in out.stderr and "SIGKILL" in out.stderr, out.stderr


def elastic_fn(marker: str, kill: bool):
    """Horovod elastic in a function: ObjectState and a model, rank 1 killed once at step 7 when ``kill``."""
    import signal

    import jupyter_torchdist.horovod as hvd

    hvd.init()
    torch.manual_seed(hvd.rank())  # different on each rank: the first sync makes them rank 0's
    model = torch.nn.Linear(3, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    resets = []
    state = hvd.elastic.TorchState(model, opt, step=0, losses=[])
    state.register_reset_callbacks([lambda: resets.append(state.step)])

    @hvd.elastic.run
    def train(state):
        while state.step < 12:
            x = torch.full((4, 3), float(state.step + hvd.rank()))
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            state.losses.append(round(float(loss), 6))
            state.step += 1
            if kill and hvd.rank() == 1 and state.step == 7 and not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            if state.step % 3 == 0:
                state.commit()

    train(state)
    return {"weights": [p.detach().clone() for p in model.parameters()], "resets": resets, "step": state.step}


@pytest.mark.spark
def test_run_elastic_restarts_every_rank_from_the_last_commit_on_spark(spark, tmp_path):
    marker = str(tmp_path / "killed")
    plain = hvd_spark.run(elastic_fn, (marker, False), num_proc=2, verbose=0)
    values = hvd_spark.run_elastic(elastic_fn, (marker, True), num_proc=2, min_num_proc=2, max_num_proc=4,
                                   reset_limit=1, verbose=0)
    assert os.path.exists(marker), "the rank was never killed"
    for before, after in zip(plain, values):
        assert after["step"] == 12 and all(torch.equal(a, b) for a, b in zip(before["weights"], after["weights"]))
    assert [v["resets"] for v in values] == [[6], [6]]  # the attempt resumed from the commit at step 6
    assert [v["resets"] for v in plain] == [[], []]


@pytest.mark.spark
def test_run_elastic_with_no_reset_left_fails_naming_the_lost_rank(spark, tmp_path):
    with pytest.raises(RunFailed, match="rank 1"):
        hvd_spark.run_elastic(elastic_fn, (str(tmp_path / "killed"), True), num_proc=2, reset_limit=0, verbose=0)
