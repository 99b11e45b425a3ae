"""Integration: real local Spark, real torch.distributed (gloo), real processes."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch

import jupyter_torchdist as jt
from jupyter_torchdist.errors import LaunchError, RunFailed, RunInterrupted, RunTimeout

from ..support import helpers
from ..support.procs import process_alive, resource_counts

pytestmark = pytest.mark.spark



def test_ddp_runs_and_rank0_value_comes_back(spark):
    result = jt.run_detailed(helpers.ddp_train, 10, n=2)
    value = result.value
    assert value["rank"] == 0 and value["world"] == 2
    assert len(value["losses"]) == 10 and value["losses"][-1] < value["losses"][0]
    assert isinstance(value["weight"], torch.Tensor) and value["weight"].device.type == "cpu"
    env = value["env"]
    assert env["RANK"] == "0" and env["WORLD_SIZE"] == "2" and env["LOCAL_WORLD_SIZE"] == "2"
    assert env["MASTER_ADDR"] == "127.0.0.1" and int(env["MASTER_PORT"]) > 0
    assert [r.state for r in result.state.ranks] == ["done", "done"]
    assert [r.step for r in result.state.ranks] == [10, 10]
    assert all(r.history for r in result.state.ranks)  # loss curve recorded from report(loss=...)


def test_all_ranks_values_and_ddp_keeps_weights_in_sync(spark):
    values = jt.run(helpers.ddp_train, 5, n=3, all_ranks=True)
    assert [v["rank"] for v in values] == [0, 1, 2]
    assert sorted(v["env"]["LOCAL_RANK"] for v in values) == ["0", "1", "2"]
    for v in values[1:]:
        assert torch.equal(v["weight"], values[0]["weight"])


def test_no_rank_exits_while_a_peer_still_needs_it(spark):
    """Rank 0 hosts the store and ends first: it stays until every rank has ended its cell."""
    assert jt.run(helpers.store_after_rank0_is_done, n=2, all_ranks=True) == ["rank 0 done", "from rank 0"]


@pytest.mark.parametrize("n", [32])
def test_many_ranks_on_one_host_with_a_trivial_cell(spark, n):
    """A cell that is just a value, on many ranks: no rank may take the group down by ending first."""
    for _ in range(2):
        assert jt.run(int, 7, n=n) == 7


def test_raising_rank_is_root_cause_with_its_traceback(spark):
    t0 = time.monotonic()
    with pytest.raises(RunFailed) as info:
        jt.run(helpers.fail_on, 1, "raise", n=3)
    took = time.monotonic() - t0
    err = info.value
    assert err.rank == 1 and err.root.kind == "exception"
    assert "ValueError: boom on rank 1" in err.root.summary
    assert "fail_on" in err.root.traceback and "jupyter_torchdist" not in err.root.traceback
    rendered = "\n".join(err._render_traceback_())
    assert "rank 1" in rendered and "root cause" in rendered
    assert took < 60, f"failure took {took:.1f}s to surface"
    failed = err.result.state.ranks[1]
    assert (failed.exit_code, failed.exit_signal) == (1, None)  # its own exit, not our stop's SIGKILL


@pytest.mark.parametrize("how, expect", [("exit", "code 7"), ("kill", "SIGKILL")])
def test_hard_exit_names_rank_and_code(spark, how, expect):
    with pytest.raises(RunFailed) as info:
        jt.run(helpers.fail_on, 1, how, n=2)
    assert info.value.rank == 1 and info.value.root.kind == "exit"
    assert expect in info.value.root.summary


def test_timeout_stops_every_rank(spark, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(RunTimeout) as info:
        jt.run(helpers.sleep_forever, str(tmp_path), n=2, timeout=4)
    assert time.monotonic() - t0 < 4 + 30
    assert "still running" in str(info.value) and "[0, 1]" in str(info.value)
    pids = [int(p.read_text()) for p in tmp_path.glob("pid-*")]
    assert len(pids) == 2
    assert not any(process_alive(p) for p in pids)


def test_interrupt_stops_every_rank_and_keeps_other_jobs(spark, tmp_path):
    other = {}

    def other_job():
        other["count"] = spark.sparkContext.parallelize(range(2), 2).map(lambda x: time.sleep(6) or x).count()

    bystander = threading.Thread(target=other_job)
    bystander.start()
    timer = threading.Timer(5.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(RunInterrupted):
        jt.run(helpers.sleep_forever, str(tmp_path), n=2)
    stopped_in = time.monotonic() - t0 - 5.0
    bystander.join(30)
    assert other.get("count") == 2, "cancelling our run must not cancel other Spark jobs"
    pids = [int(p.read_text()) for p in tmp_path.glob("pid-*")]
    assert len(pids) == 2 and not any(process_alive(p) for p in pids)
    assert stopped_in < 30


def test_reruns_leak_nothing(spark, descendants):
    jt.run(helpers.ddp_train, 2, n=2)  # warm
    before = resource_counts()
    for i in range(6):
        if i % 3 == 2:
            with pytest.raises(RunFailed):
                jt.run(helpers.fail_on, 0, "raise", n=2)
        else:
            jt.run(helpers.ddp_train, 2, n=2)
    after = resource_counts()
    assert after["threads"] <= before["threads"]
    assert after["sockets"] <= before["sockets"] + 1
    assert after["fds"] <= before["fds"] + 2
    assert after["children"] <= before["children"], "rank processes outlived their runs"


def test_spark_local_master_checks_the_drivers_gpus(spark, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    with pytest.raises(LaunchError, match="shows 0"):
        jt.run(len, [], n=1, gpu=True)
