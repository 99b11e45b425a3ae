"""Kept ranks through the Python API (jt.Ranks): real rank processes and process groups, local and Spark."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import jupyter_torchdist as jt

from ..support.procs import all_gone, resource_counts

SETUP = ("import os, time, torch, torch.distributed as dist\n"
         "pid, rank = os.getpid(), dist.get_rank()\n")
TRAIN_SETUP = SETUP + (
    "from torch.nn.parallel import DistributedDataParallel as DDP\n"
    "torch.manual_seed(0)\n"
    "model = DDP(torch.nn.Linear(8, 1))\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.05)\n"
    "step = 0\n"
    "def train(k):\n"
    "    global step\n"
    "    for _ in range(k):\n"
    "        g = torch.Generator().manual_seed(100 * rank + step)\n"
    "        x = torch.randn(16, 8, generator=g)\n"
    "        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()\n"
    "        opt.zero_grad(); loss.backward(); opt.step(); step += 1\n"
    "    return {'step': step, 'pid': pid, 'w': model.module.weight.detach().clone()}\n")


def _pids(ranks: jt.Ranks) -> list[int]:
    info = ranks.describe()
    assert info is not None
    return [pid for _, pid in info.hosts.values() if pid is not None]


def _interrupt_in(seconds: float) -> threading.Timer:
    """What the notebook's stop button does: SIGINT to this process (the kernel), here from a timer."""
    timer = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def test_state_is_kept_across_cells_while_ddp_trains(backend):
    with jt.Ranks(n=2, local=backend == "local", all_ranks=True) as ranks:
        ranks.run_cell(TRAIN_SETUP)
        first = ranks.run_cell("train(3)")
        second = ranks.run_cell("train(4)")
        third = ranks.run_cell("train(5)")
        assert [v["step"] for v in third] == [12, 12] and [v["step"] for v in first] == [3, 3]
        assert [v["pid"] for v in first] == [v["pid"] for v in second] == [v["pid"] for v in third]
        assert first[0]["pid"] != first[1]["pid"] != os.getpid()
        assert (third[0]["w"] == third[1]["w"]).all(), "DDP keeps every rank's parameters equal"
        assert not (third[0]["w"] == first[0]["w"]).all(), "and they moved"
        info = ranks.describe()
        assert info.cells == 4 and info.n == 2 and info.local == (backend == "local")
        pids = _pids(ranks)
    assert all_gone(pids), "leaving the with-block stops every rank"


def test_a_plain_raise_on_one_rank_leaves_the_ranks_up(backend):
    with jt.Ranks(n=2, local=backend == "local") as ranks:
        before = ranks.run_cell(SETUP + "pid")
        with pytest.raises(jt.RunFailed) as info:
            ranks.run_cell("if rank == 1:\n    raise ValueError('only rank 1')\n'ok'")
        err = info.value
        assert err.rank == 1 and "ValueError: only rank 1" in str(err) and "survived" in err.extra[-1]
        assert ranks.alive and ranks.run_cell("pid") == before


def test_an_interrupt_during_python_code_leaves_the_ranks_up(backend):
    with jt.Ranks(n=2, local=backend == "local") as ranks:
        before = ranks.run_cell(SETUP + "pid")
        _interrupt_in(1.0)
        t0 = time.monotonic()
        with pytest.raises(jt.RunInterrupted) as info:
            ranks.run_cell("while True:\n    time.sleep(0.05)")
        assert time.monotonic() - t0 < 5 and "survived" in info.value.extra[-1]
        assert ranks.run_cell("pid") == before


def test_a_timeout_interrupts_and_the_ranks_stay(backend):
    with jt.Ranks(n=2, local=backend == "local", timeout=1.5) as ranks:
        before = ranks.run_cell(SETUP + "pid")
        with pytest.raises(jt.RunTimeout) as info:
            ranks.run_cell("time.sleep(60)")
        assert "survived" in info.value.extra[-1] and ranks.run_cell("pid") == before


def test_a_failure_inside_a_collective_loop_stops_the_kept_ranks(backend):
    """Rank 0 waits in all_reduce for a peer that left it: it cannot be interrupted, so the set goes."""
    ranks = jt.Ranks(n=2, local=backend == "local")
    ranks.run_cell(SETUP)
    pids = _pids(ranks)
    t0 = time.monotonic()
    with pytest.raises(jt.RunFailed) as info:
        ranks.run_cell("for i in range(10**7):\n    t = torch.ones(1)\n    dist.all_reduce(t)\n"
                       "    if rank == 1 and i == 20:\n        raise RuntimeError('fails in the loop')")
    err = info.value
    assert err.rank == 1 and "fails in the loop" in str(err)
    assert "were stopped" in err.extra[-1] and "state" in err.extra[-1] and "gone" in err.extra[-1]
    assert not ranks.alive and all_gone(pids) and time.monotonic() - t0 < 20


def test_an_interrupt_inside_a_collective_loop_says_truly_what_happened(backend):
    """Either every rank got back (survived) or one was stuck in all_reduce (stopped): the message says which."""
    ranks = jt.Ranks(n=2, local=backend == "local")
    ranks.run_cell(SETUP)
    pids = _pids(ranks)
    _interrupt_in(1.0)
    with pytest.raises(jt.RunError) as info:
        ranks.run_cell("while True:\n    t = torch.ones(1)\n    dist.all_reduce(t)")
    said = info.value.extra[-1]
    if "survived" in said:
        assert ranks.alive and ranks.run_cell("rank") == 0 and _pids(ranks) == pids
        ranks.stop()
    else:
        assert "were stopped" in said and not ranks.alive
    assert all_gone(pids)


def test_a_rank_killed_stops_the_kept_ranks(backend):
    ranks = jt.Ranks(n=2, local=backend == "local")
    ranks.run_cell(SETUP)
    pids = _pids(ranks)
    with pytest.raises(jt.RunFailed) as info:
        ranks.run_cell("if rank == 1:\n    os.kill(os.getpid(), 9)\ntime.sleep(30)")
    err = info.value
    assert err.rank == 1 and "SIGKILL" in err.root.summary and "were stopped" in err.extra[-1]
    assert not ranks.alive and all_gone(pids)


def test_stop_ends_every_process_and_a_second_stop_says_none(backend):
    ranks = jt.Ranks(n=2, local=backend == "local")
    ranks.run_cell(SETUP)
    pids = _pids(ranks)
    t0 = time.monotonic()
    assert ranks.stop() and all_gone(pids, within=10)
    assert time.monotonic() - t0 < 10 and ranks.describe() is None and not ranks.stop()


@pytest.mark.spark
def test_a_one_shot_run_and_a_spark_job_beside_kept_ranks(spark):
    with jt.Ranks(n=2) as ranks:
        ranks.run_cell(SETUP + "x = 41")
        assert jt.run(int, 7, n=2) == 7
        assert spark.range(1000).count() == 1000
        with pytest.raises(jt.LaunchError, match="kept ranks hold 2"):
            jt.run(int, 1, n=255)
        assert ranks.run_cell("x + 1") == 42


def test_thirty_kept_cells_leak_nothing(backend):
    with jt.Ranks(n=2, local=backend == "local") as ranks:
        ranks.run_cell(SETUP + "n = 0")
        for _ in range(3):
            ranks.run_cell("n += 1")
        before = resource_counts()
        for _ in range(30):
            ranks.run_cell("n += 1\nt = torch.ones(1)\ndist.all_reduce(t)\nprint(n)\nn")
        after = resource_counts()
        assert ranks.run_cell("n") == 33
    assert after == before, (before, after)


def test_run_calls_a_function_on_the_kept_ranks():
    def where_am_i(offset):
        import torch.distributed as dist

        return dist.get_rank() + offset

    with jt.Ranks(n=2, local=True, all_ranks=True) as ranks:
        assert ranks.run(where_am_i, 10) == [10, 11]
        assert ranks.run_cell("import torch.distributed as dist\ndist.get_world_size()") == [2, 2]
