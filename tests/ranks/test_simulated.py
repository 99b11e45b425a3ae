"""Simulated ranks (tests/support/simulated.py) go through the kernel's whole real path: hundreds of them connect with
the run's secret, report, log, return rank 0's value over the channel and are released; a failing one is named as
the root cause and every other one stopped; a wrong specification is said plainly."""
from __future__ import annotations

import time

import pytest

import jupyter_torchdist as jt
from jupyter_torchdist.core.errors import LaunchError, RunFailed
from jupyter_torchdist.launchers import backend_for
from tests.support import simulated
from tests.support.simulated import PER_PROCESS, SIMULATE_ENV
from jupyter_torchdist.core.options import RunOptions


@pytest.fixture(autouse=True)
def registered():
    """The tests register the simulated backend themselves: the package never does."""
    simulated.enable()
    yield
    simulated.disable()


def noop() -> None:
    return None


def test_hundreds_of_ranks_in_several_processes_report_and_return_rank_0s_value(monkeypatch):
    monkeypatch.setenv(SIMULATE_ENV, "steps=20,every=0.05,log_every=10,hosts=4")
    assert backend_for(RunOptions(n=2, local=True)).name == "simulated"  # above every backend, --local included
    n = PER_PROCESS + 44  # two processes of simulated ranks
    result = jt.run_detailed(noop, n=n)
    assert result.value == {"rank": 0, "steps": 20}
    snap = result.state.snapshot()
    assert snap["status"] == "succeeded" and snap["world_size"] == n and snap["backend"].startswith("simulated")
    assert all(r.step == r.total == 20 and r.state == "done" for r in result.state.ranks)
    # a run of this many ranks is drawn as a summary and a compact table of every rank
    assert snap["summary"]["counts"] == {"done": n} and len(snap["summary"]["hosts"]) == 4
    table = snap["table"]
    assert [row[0] for row in table["rows"]] == list(range(n))
    assert {table["states"][row[2]] for row in table["rows"]} == {"done"} and {row[3] for row in table["rows"]} == {20}
    assert all(len(result.logs[r]) == 2 for r in range(n))  # a line at steps 10 and 20, from every rank


def test_the_failing_rank_is_the_root_cause_and_the_others_are_stopped(monkeypatch):
    monkeypatch.setenv(SIMULATE_ENV, "steps=400,every=0.05,fail_rank=37,fail_at=1")
    t0 = time.monotonic()
    with pytest.raises(RunFailed) as caught:
        jt.run(noop, n=128)
    assert time.monotonic() - t0 < 15  # not the 20 s the ranks would otherwise train
    assert "rank 37" in str(caught.value) and "simulated failure on rank 37" in str(caught.value)
    states = {r.state for r in caught.value.result.state.ranks if r.rank != 37}
    assert states <= {"stopped", "failed"} and "stopped" in states, states
    snap = caught.value.result.state.snapshot()
    assert snap["summary"]["outliers"][0]["rank"] == 37 and snap["summary"]["outliers"][0]["why"] == "failed"
    assert 37 in {r["rank"] for r in snap["ranks"]}, "the failed rank keeps its full row"


def test_a_wrong_specification_is_said_plainly(monkeypatch):
    monkeypatch.setenv(SIMULATE_ENV, "steps=10,speed=3")
    with pytest.raises(LaunchError, match="'speed=3' is not one of steps=..., every=..."):
        jt.run(noop, n=2)


@pytest.mark.spark
def test_hundreds_of_simulated_ranks_inside_spark_barrier_tasks_run_fail_and_stop(spark, monkeypatch):
    """The Spark launcher's own path at scale (the benchmark runs 1,024 ranks in 256 tasks): one barrier job of 32
    tasks on the embedded session, 16 ranks in each; then the same with a failing rank: named as the root cause,
    and the barrier job cancelled (every task ends, so the session's slots are free for the next run)."""
    monkeypatch.setenv(SIMULATE_ENV, "steps=6,every=0.1,log_every=3,hosts=8,tasks=32")
    result = jt.run_detailed(noop, n=512)
    assert result.value == {"rank": 0, "steps": 6}
    snap = result.state.snapshot()
    assert snap["backend"].startswith("simulated ranks in 32 barrier tasks of spark local[")
    assert snap["status"] == "succeeded" and snap["summary"]["counts"] == {"done": 512}
    assert all(len(result.logs[r]) == 2 for r in range(512))

    monkeypatch.setenv(SIMULATE_ENV, "steps=400,every=0.1,tasks=32,fail_rank=300,fail_at=0.5")
    t0 = time.monotonic()
    with pytest.raises(RunFailed) as caught:
        jt.run(noop, n=512)
    assert time.monotonic() - t0 < 30  # not the 40 s the ranks would otherwise train
    assert "rank 300" in str(caught.value) and "simulated failure on rank 300" in str(caught.value)
    assert not spark.sparkContext.statusTracker().getActiveJobsIds(), "the barrier job outlived its run"


def test_a_stale_simulation_variable_changes_nothing_in_a_users_process(tmp_path):
    """A fresh process (a user's kernel) with JUPYTER_TORCHDIST_SIMULATE left in its environment runs the real code."""
    import os
    import subprocess
    import sys

    code = "import jupyter_torchdist as jt\nprint('VALUE', jt.run(pow, 6, 2, n=2, local=True))"
    env = {**os.environ, SIMULATE_ENV: "steps=5,every=0.01"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                          stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert "VALUE 36" in done.stdout, done.stdout + done.stderr
