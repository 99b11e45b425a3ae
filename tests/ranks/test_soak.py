"""30 runs in a row (succeeding, failing four ways, interrupted, timed out) leak nothing.

Counted in the test process: threads, open fds, sockets, descendant processes. Counted on the executor
side (from /proc): every rank process of every run is gone when its call returns, and the Spark Python
workers that host the agents do not pile up.
"""
from __future__ import annotations

import ctypes
import os
import signal
import threading
import time

import cloudpickle
import pytest

import jupyter_torchdist as jt
from jupyter_torchdist.core.errors import RunFailed, RunInterrupted, RunTimeout

from ..support import fault_helpers as fh
from ..support.procs import process_alive, resource_counts

cloudpickle.register_pickle_by_value(fh)  # the ranks cannot import the tests package
pytestmark = pytest.mark.spark

PR_SET_CHILD_SUBREAPER = 36
PLAN = ["ok", "raise", "ok", "interrupt", "exit", "timeout", "ok", "kill", "ok", "segv"] * 3  # 30 runs



def _python_workers(root: int) -> set[int]:
    """Spark Python workers (forked by the daemon) under ``root``: where the agents run."""
    from ..support.procs import descendants_of

    procs: dict[int, int] = {}
    for pid in descendants_of(root):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if argv[1:2] == [b"-m"] and argv[2:3] in ([b"jupyter_torchdist._daemon"], [b"pyspark.daemon"]):
            procs[pid] = ppid  # the daemon and the workers it forked (same command line)
    daemons = {pid for pid, ppid in procs.items() if ppid not in procs}
    return {pid for pid, ppid in procs.items() if ppid in daemons}


def _one_run(kind: str, marker_dir: str) -> None:
    if kind == "ok":
        assert jt.run(fh.quick, marker_dir, n=2) == 1
    elif kind in ("raise", "exit", "kill", "segv"):
        fn, args = (fh.raise_on, (1, marker_dir, 0.05)) if kind == "raise" else (fh.die_on, (1, kind, marker_dir, 0.05))
        with pytest.raises(RunFailed) as info:
            jt.run(fn, *args, n=2)
        assert info.value.rank == 1
    elif kind == "timeout":
        with pytest.raises(RunTimeout):
            jt.run(fh.block, marker_dir, n=2, timeout=3)
    elif kind == "interrupt":
        def interrupt() -> None:
            fh.wait_for_markers(marker_dir, 2)
            os.kill(os.getpid(), signal.SIGINT)

        t = threading.Thread(target=interrupt)
        t.start()
        with pytest.raises(RunInterrupted):
            jt.run(fh.block, marker_dir, n=2)
        t.join()


def _set_subreaper(on: bool) -> None:
    """Orphans (a rank whose agent died) are re-parented to us instead of init, so they are counted too."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)


@pytest.fixture
def subreaper():
    _set_subreaper(True)
    yield
    _set_subreaper(False)


@pytest.mark.timeout(900)  # 30 runs: about 20 s on a quiet 2-core machine, minutes on a loaded one
def test_thirty_mixed_runs_leak_nothing(spark, tmp_path, descendants, subreaper):
    me = os.getpid()
    for kind in ("ok", "raise", "interrupt", "timeout"):  # warm: workers, py4j connections, the job thread
        d = tmp_path / f"warm-{kind}"
        d.mkdir()
        _one_run(kind, str(d))
    before = resource_counts()
    workers_before = _python_workers(me)
    print(f"METRIC soak_before {before} python_workers={len(workers_before)}")
    t0 = time.monotonic()
    seen_workers: set[int] = set()
    for i, kind in enumerate(PLAN):
        d = tmp_path / f"run{i:02d}-{kind}"
        d.mkdir()
        _one_run(kind, str(d))
        markers = fh.read_markers(str(d))
        # a timeout may hit before a loaded machine starts the ranks: then Spark's cancel is what is tested
        assert markers or kind == "timeout", f"run {i} ({kind}) never started"
        survivors = [m["pid"] for m in markers.values() if process_alive(m["pid"])]
        assert not survivors, f"run {i} ({kind}): rank processes {survivors} outlived the run"
        seen_workers |= {m["ppid"] for m in markers.values()}
    took = time.monotonic() - t0
    after = resource_counts()
    workers_after = _python_workers(me)
    print(f"METRIC soak_after {after} python_workers={len(workers_after)} distinct_agents={len(seen_workers)} "
          f"runs={len(PLAN)} in {took:.1f}s")
    assert after["threads"] <= before["threads"], (before, after)
    assert after["fds"] <= before["fds"], (before, after)
    assert after["sockets"] <= before["sockets"], (before, after)
    assert after["children"] <= before["children"], (before, after)
    assert len(workers_after) <= max(len(workers_before), 2), (workers_before, workers_after)
    # no process forked by an agent (a rank, or anything a rank started) is left on the executors
    leftovers = [pid for pid in descendants() if _parent(pid) in workers_after]
    assert not leftovers, f"processes left under the Python workers: {[_describe(p) for p in leftovers]}"


def _describe(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return f"{pid} (gone)"
    return f"{pid}: {stat[:120]} :: {cmd}"


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None
