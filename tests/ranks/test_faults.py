"""Faults while a run is going, on a real local Spark session with real gloo collectives.

Each test measures how fast the run fails or stops (printed as METRIC lines, see ``-s``) and checks from
/proc that no rank process of the run is left when the call returns.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import cloudpickle
import pytest

import jupyter_torchdist as jt
from jupyter_torchdist.kernel.pickling import pack
from jupyter_torchdist.core.errors import RunFailed, RunInterrupted, RunTimeout
from jupyter_torchdist.kernel.runs.rankset import RankSet
from jupyter_torchdist.core.options import RunOptions
from jupyter_torchdist.kernel.runs.driver import execute
from jupyter_torchdist.views import NullView

from ..support import fault_helpers as fh
from ..support.procs import process_alive

cloudpickle.register_pickle_by_value(fh)  # the ranks cannot import the tests package
pytestmark = pytest.mark.spark



def metric(name: str, seconds: float) -> None:
    print(f"METRIC {name} {seconds:.2f}s")


def _rank_pids(marker_dir) -> list[int]:
    return [m["pid"] for m in fh.read_markers(str(marker_dir)).values()]


def test_rank_raising_among_four_is_always_the_root_cause(spark, tmp_path):
    for rep in range(4):
        d = tmp_path / f"rep{rep}"
        d.mkdir()
        with pytest.raises(RunFailed) as info:
            jt.run(fh.raise_on, 2, str(d), n=4)
        took = time.time() - fh.read_markers(str(d))[2]["raising_at"]
        err = info.value
        assert err.rank == 2 and err.root.kind == "exception", f"repetition {rep}: root was {err.root}"
        assert "ValueError: boom on rank 2" in err.root.summary
        assert all(f.secondary for r, f in err.failures.items() if r != 2), err.failures
        pids = _rank_pids(d)
        assert len(pids) == 4 and not any(process_alive(p) for p in pids)
        metric(f"fail_after_raise[rep{rep}]", took)
        assert took < 30


@pytest.mark.parametrize("how, expect", [("exit", "exited with code 7"), ("segv", "killed by SIGSEGV"),
                                         ("kill", "killed by SIGKILL")])
def test_hard_death_names_rank_and_how_and_peers_in_a_collective_are_stopped(spark, tmp_path, how, expect):
    with pytest.raises(RunFailed) as info:
        jt.run(fh.die_on, 1, how, str(tmp_path), n=3)
    took = time.time() - fh.read_markers(str(tmp_path))[1]["dying_at"]
    err = info.value
    assert err.rank == 1 and err.root.kind == "exit" and expect in err.root.summary, err.root
    if how == "kill":
        assert "out of memory" in err.root.summary  # the OOM killer's signature
    pids = _rank_pids(tmp_path)
    assert len(pids) == 3 and not any(process_alive(p) for p in pids)  # peers were blocked in all_reduce
    metric(f"fail_after_{how}", took)
    assert took < 30


def test_timeout_stops_every_rank_and_only_this_runs_job(spark, tmp_path):
    """Another Spark job, blocked until we release it, runs across our run's timeout and is left alone."""
    release = tmp_path / "release"
    other: dict = {}

    def held(x: int) -> int:
        deadline = time.time() + 120
        while not os.path.exists(str(release)) and time.time() < deadline:
            time.sleep(0.05)
        return x

    def bystander() -> None:
        try:
            other["count"] = spark.sparkContext.parallelize(range(2), 2).map(held).count()
        except Exception as exc:
            other["error"] = repr(exc)[:300]

    t = threading.Thread(target=bystander)
    t.start()
    markers = tmp_path / "markers"
    markers.mkdir()
    t0 = time.monotonic()
    with pytest.raises(RunTimeout) as info:
        jt.run(fh.block, str(markers), n=2, timeout=10)
    stopped_after = time.monotonic() - t0 - 10
    assert "timed out after 10 s" in str(info.value) and "[0, 1]" in str(info.value)
    pids = _rank_pids(markers)
    assert len(pids) == 2 and not any(process_alive(p) for p in pids)
    assert t.is_alive() and "error" not in other, "the other job was stopped with ours"
    release.write_text("")
    t.join(60)
    assert other.get("count") == 2, other
    metric("stop_after_timeout", stopped_after)
    assert stopped_after < 10


def test_interrupt_stops_every_rank_within_seconds(spark, tmp_path):
    sent: dict = {}

    def interrupt_when_running() -> None:
        fh.wait_for_markers(str(tmp_path), 2)
        sent["at"] = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)

    t = threading.Thread(target=interrupt_when_running)
    t.start()
    with pytest.raises(RunInterrupted):
        jt.run(fh.block, str(tmp_path), n=2)
    stopped_after = time.monotonic() - sent["at"]
    t.join()
    pids = _rank_pids(tmp_path)
    assert len(pids) == 2 and not any(process_alive(p) for p in pids)
    metric("stop_after_interrupt", stopped_after)
    assert stopped_after < 10


def test_executor_lost_mid_run_is_a_clear_error_not_a_hang(spark, tmp_path):
    """SIGKILL the Spark Python worker hosting rank 1 (its agent: the rank's parent)."""
    killed: dict = {}

    def kill_agent() -> None:
        markers = fh.wait_for_markers(str(tmp_path), 2)
        killed["agent"], killed["rank"] = markers[1]["ppid"], markers[1]["pid"]
        killed["at"] = time.monotonic()
        os.kill(killed["agent"], signal.SIGKILL)

    t = threading.Thread(target=kill_agent)
    t.start()
    with pytest.raises(RunFailed) as info:
        jt.run(fh.block, str(tmp_path), n=2)
    took = time.monotonic() - killed["at"]
    t.join()
    err = info.value
    assert err.rank == 1 and err.root.kind == "lost", err.root
    assert f"pid {killed['agent']}" in err.root.summary and "the Spark task (its Python worker)" in err.root.summary
    assert "py4j" not in err.root.summary and "collectAndServe" not in err.root.summary
    assert not process_alive(killed["rank"]) and not any(process_alive(p) for p in _rank_pids(tmp_path))
    metric("fail_after_agent_killed", took)
    assert took < 30


def test_value_too_large_to_bring_back_says_its_size_and_what_to_do(spark):
    options = RunOptions(n=2, max_value_mb=1)
    payload = pack(fh.big_value, (2.5,), max_bytes=1 << 20)
    with pytest.raises(RunFailed) as info:
        execute(payload, options, RankSet.prepared(options), NullView())
    root = info.value.root
    assert root.rank == 0
    assert "2.5 MB" in root.summary and "over the limit of 1.0 MB" in root.summary and "--max-value-mb" in root.summary
    assert "torch.save" in root.summary and "return the path" in root.summary


def test_a_ranks_result_arriving_after_its_agents_exit_report_is_still_a_success(spark, monkeypatch):
    """Rank and agent talk over two sockets read by two threads: on a busy kernel the agent's "the rank
    exited" can overtake the rank's own result. Here rank 1's messages are delivered 300 ms late."""
    import queue

    from jupyter_torchdist.kernel.runs import rankset as supervisor

    class LateRankOne:
        """Rank 1's messages go through one forwarding thread, each 300 ms late and in order."""

        def __init__(self, inner) -> None:
            self.inner, self.late = inner, queue.SimpleQueue()
            threading.Thread(target=self._forward, daemon=True).start()

        def _forward(self) -> None:
            while True:
                due, ev = self.late.get()
                time.sleep(max(0.0, due - time.monotonic()))  # test-side delay injection, not sync
                self.inner.put(ev)

        def put(self, ev) -> None:
            if ev.role == "rank" and ev.rank == 1:
                self.late.put((time.monotonic() + 0.3, ev))
            else:
                self.inner.put(ev)

    real = supervisor.ChannelServer

    class LaggingServer(real):
        def __init__(self, *args, inbox=None, **kwargs):
            super().__init__(*args, inbox=LateRankOne(inbox or queue.SimpleQueue()), **kwargs)

    monkeypatch.setattr(supervisor, "ChannelServer", LaggingServer)
    for _ in range(2):
        assert jt.run(fh.quick, n=2) == 1
