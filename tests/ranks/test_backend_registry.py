"""A launcher backend is one class, registered in one place: the registry picks it, and the one run path runs
cells on it (values, a rank's failure, kept ranks), with nothing else in the package changed.

The test backend starts each rank's agent as a plain ``python`` subprocess (the way torchrun would), so it
shares no code with the Spark or --local backends beyond the ``Launcher`` interface.
"""
from __future__ import annotations

import queue
import subprocess
import sys
import threading

import cloudpickle
import pytest

import jupyter_torchdist as jt
from jupyter_torchdist.core import contract as C
from jupyter_torchdist.core.contract import Inbound, LaunchInfo, RunPlan
from jupyter_torchdist.core.errors import RunFailed
from jupyter_torchdist.launchers import Capacity, Launcher, backend_for, backends, register, unregister
from jupyter_torchdist.core.options import RunOptions

from ..support.procs import all_gone

_AGENT = ("import sys, cloudpickle\n"
          "from jupyter_torchdist.rank.agent import run_agent\n"
          "plan, rank = cloudpickle.load(sys.stdin.buffer)\n"
          "run_agent(plan, rank)\n")


class SubprocessLauncher(Launcher):
    """Each rank's agent in a fresh ``python`` process on this machine."""

    name = "subprocess"
    started: list[int] = []  # every agent pid, for the test to check they are gone

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[bytes]] = []

    def prepare(self, options: RunOptions) -> LaunchInfo:
        return LaunchInfo(label="subprocess (test backend)", channel_host="127.0.0.1", loopback=True,
                          watcher="the subprocess agent")

    def start(self, plan: RunPlan, inbox: queue.SimpleQueue[Inbound]) -> None:
        for rank in range(plan.world_size):
            proc = subprocess.Popen([sys.executable, "-c", _AGENT], stdin=subprocess.PIPE)
            assert proc.stdin is not None
            proc.stdin.write(cloudpickle.dumps((plan, rank)))
            proc.stdin.close()
            self._procs.append(proc)
            SubprocessLauncher.started.append(proc.pid)
        threading.Thread(target=self._wait, args=(inbox,), daemon=True).start()

    def _wait(self, inbox: queue.SimpleQueue[Inbound]) -> None:
        codes = [proc.wait() for proc in self._procs]
        bad = [f"agent {r} exited with {c}" for r, c in enumerate(codes) if c]
        inbox.put(Inbound(-1, C.BACKEND, {"t": C.JOB_END, "error": "; ".join(bad) or None}))

    def cancel(self) -> None:
        for proc in self._procs:
            proc.kill()

    def capacity(self) -> Capacity:
        return Capacity(slots=None, default_ranks=2, where="this machine")


@pytest.fixture
def subprocess_backend():
    register("subprocess", SubprocessLauncher, lambda options: True, priority=1000)
    try:
        yield
    finally:
        unregister("subprocess")
    assert all_gone(SubprocessLauncher.started, within=15)


def _world(scale: float) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    return float(t.item()) * scale


def _fails_on_rank_1() -> None:
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise ValueError("rank 1 says no")


def test_the_built_in_backends_are_chosen_by_what_the_run_asks_for():
    # local first; the simulated ranks of tests and benchmarks are not among them (tests register them)
    assert [b.name for b in backends()][:1] == ["local"] and backends()[-1].name == "spark"
    assert "simulated" not in [b.name for b in backends()]
    assert backend_for(RunOptions(local=True)).name == "local"
    assert backend_for(RunOptions()).name == "spark"


def test_a_registered_backend_runs_cells_on_the_one_run_path(subprocess_backend):
    assert backend_for(RunOptions()).name == "subprocess"
    result = jt.run_detailed(_world, 10.0, n=2)
    assert result.value == 30.0 and result.state.backend == "subprocess (test backend)"
    assert [r.state for r in result.state.ranks] == ["done", "done"]
    with pytest.raises(RunFailed) as info:
        jt.run(_fails_on_rank_1, n=2)
    assert info.value.rank == 1 and "rank 1 says no" in info.value.root.traceback


def test_kept_ranks_run_on_a_registered_backend_too(subprocess_backend):
    with jt.Ranks(n=2) as ranks:
        ranks.run_cell("import torch.distributed as dist\nx = dist.get_rank() + 1")
        assert ranks.run_cell("x * 2") == 2
        assert ranks.describe().backend_name == "subprocess"
    assert not ranks.alive
