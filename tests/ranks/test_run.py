"""What every launcher does alike, on real ranks with real torch.distributed (gloo): ``--local`` (rank processes on
this machine, no Spark) and the embedded local Spark session (barrier tasks). Each test runs once per ``backend``.

What only one launcher has is beside this module: test_run_local.py and test_run_spark.py.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch

import jupyter_torchdist as jt
from jupyter_torchdist.core.errors import RunFailed, RunInterrupted, RunTimeout

from ..support import helpers
from ..support.procs import all_gone, process_alive, resource_counts

# --timeout and the stop button, per launcher: (seconds until the timeout or the interrupt, how long stopping may take)
TIMEOUT = {"local": (5, 8), "spark": (4, 30)}
INTERRUPT = {"local": (2.0, 6), "spark": (5.0, 30)}


def _rank_pids(marker_dir) -> list[int]:
    return [int(p.read_text()) for p in marker_dir.glob("pid-*")]


def _stopped(pids: list[int], backend: str) -> bool:
    """Every rank has exited: on Spark by the time the call returns; a --local rank is waited for a moment."""
    if backend == "spark":
        return not any(process_alive(p) for p in pids)
    return all_gone(pids)


@pytest.mark.parametrize("backend", [pytest.param("local", marks=pytest.mark.quick),
                                     pytest.param("spark", marks=pytest.mark.spark)], indirect=True)
def test_ddp_runs_and_rank0_value_comes_back_with_env_and_live_state(backend):
    result = jt.run_detailed(helpers.ddp_train, 10, n=2, local=backend == "local")
    value = result.value
    assert value["rank"] == 0 and value["world"] == 2
    assert len(value["losses"]) == 10 and value["losses"][-1] < value["losses"][0]
    assert isinstance(value["weight"], torch.Tensor) and value["weight"].device.type == "cpu"
    env = value["env"]
    assert env["RANK"] == "0" and env["WORLD_SIZE"] == "2" and env["LOCAL_WORLD_SIZE"] == "2"
    assert env["MASTER_ADDR"] == "127.0.0.1" and int(env["MASTER_PORT"]) > 0
    horovodrun = {k[8:]: v for k, v in env.items() if k.startswith("HOROVOD_")}
    assert horovodrun == {"RANK": "0", "SIZE": "2", "LOCAL_RANK": "0", "LOCAL_SIZE": "2", "CROSS_RANK": "0",
                          "CROSS_SIZE": "1"}  # as horovodrun sets them: Horovod scripts read them
    assert (result.state.backend == "local") if backend == "local" else result.state.backend.startswith("spark")
    assert [r.state for r in result.state.ranks] == ["done", "done"]
    assert [r.step for r in result.state.ranks] == [10, 10]
    assert all(r.history for r in result.state.ranks)  # loss curve recorded from report(loss=...)


def test_ranks_are_separate_processes_in_sync_and_never_the_kernel(backend):
    local = backend == "local"
    values = jt.run(helpers.ddp_train, 5, n=3, local=local, all_ranks=True)
    assert [v["rank"] for v in values] == [0, 1, 2]
    assert sorted(v["env"]["LOCAL_RANK"] for v in values) == ["0", "1", "2"]
    for v in values[1:]:
        assert torch.equal(v["weight"], values[0]["weight"])
    pids = jt.run(os.getpid, n=3, local=local, all_ranks=True)
    assert len(set(pids)) == 3 and os.getpid() not in pids


def test_no_rank_exits_while_a_peer_still_needs_it(backend):
    """Rank 0 hosts the store and ends first: it must stay until every rank has ended its cell
    (it used to exit at once, and 64 ranks on one host then failed with "Connection reset by peer")."""
    assert jt.run(helpers.store_after_rank0_is_done, n=2, local=backend == "local", all_ranks=True) == \
        ["rank 0 done", "from rank 0"]


def test_raising_rank_is_root_cause_with_its_traceback(backend):
    t0 = time.monotonic()
    with pytest.raises(RunFailed) as info:
        jt.run(helpers.fail_on, 1, "raise", n=3, local=backend == "local")
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
def test_hard_exit_names_rank_and_code(backend, how, expect):
    with pytest.raises(RunFailed) as info:
        jt.run(helpers.fail_on, 1, how, n=2, local=backend == "local")
    assert info.value.rank == 1 and info.value.root.kind == "exit"
    assert expect in info.value.root.summary


def test_timeout_stops_every_rank(backend, tmp_path):
    local = backend == "local"
    timeout, slack = TIMEOUT[backend]
    jt.run(os.getpid, n=1, local=local)  # warm: the timeout lands while ranks run, not while torch imports
    t0 = time.monotonic()
    with pytest.raises(RunTimeout) as info:
        jt.run(helpers.sleep_forever, str(tmp_path), n=2, local=local, timeout=timeout)
    assert time.monotonic() - t0 < timeout + slack
    assert "still running" in str(info.value) and "[0, 1]" in str(info.value)
    pids = _rank_pids(tmp_path)
    assert len(pids) == 2 and _stopped(pids, backend)


def test_interrupt_stops_every_rank(backend, tmp_path, request):
    """On Spark, another Spark job runs alongside: cancelling our run must leave it alone."""
    local = backend == "local"
    delay, slack = INTERRUPT[backend]
    jt.run(os.getpid, n=1, local=local)  # warm: the interrupt lands while ranks run, not while torch imports
    other: dict = {}
    if not local:
        spark = request.getfixturevalue("spark")

        def other_job():
            other["count"] = spark.sparkContext.parallelize(range(2), 2).map(lambda x: time.sleep(6) or x).count()

        bystander = threading.Thread(target=other_job)
        bystander.start()
    timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(RunInterrupted):
        jt.run(helpers.sleep_forever, str(tmp_path), n=2, local=local)
    stopped_in = time.monotonic() - t0 - delay
    if not local:
        bystander.join(30)
        assert other.get("count") == 2, "cancelling our run must not cancel other Spark jobs"
    pids = _rank_pids(tmp_path)
    assert len(pids) == 2 and _stopped(pids, backend)
    assert stopped_in < slack


def test_reruns_leak_nothing(backend):
    local = backend == "local"
    jt.run(helpers.ddp_train, 2, n=2, local=local)  # warm
    before = resource_counts()
    for i in range(6):
        if i % 3 == 2:
            with pytest.raises(RunFailed):
                jt.run(helpers.fail_on, 0, "raise", n=2, local=local)
        else:
            jt.run(helpers.ddp_train, 2, n=2, local=local)
    after = resource_counts()
    assert after["threads"] <= before["threads"]
    assert after["fds"] <= before["fds"] + 2 and after["sockets"] <= before["sockets"] + 1
    assert after["children"] <= before["children"], "rank processes outlived their runs"
