"""Unit: a one-shot run ends when its every rank has returned over the live channel and exited, not when the launcher's
job has ended after that; the job is still seen to end, and cancelled if it does not. A failure, a stop or results
replayed from an offline record still wait for the job's end, as before."""
from __future__ import annotations

import queue

from jupyter_torchdist.core import contract as C
from jupyter_torchdist.core.options import RunOptions
from jupyter_torchdist.kernel.runs import rankset
from jupyter_torchdist.kernel.runs.supervisor import Supervisor
from jupyter_torchdist.kernel.state.run import RunState
from jupyter_torchdist.views import NullView

from .test_moot_early_stop import _Agents


class _Live(_Agents):
    """Every rank connected to the channel (``offline``: none, the run's record is replayed at the job's end)."""

    def __init__(self, offline: bool = False) -> None:
        super().__init__()
        self.offline = offline

    def connected(self, role: str) -> set[int]:
        return set() if self.offline else {0, 1}


class _Launcher:
    def __init__(self) -> None:
        self.cancels = 0

    def cancel(self) -> None:
        self.cancels += 1


def _supervised(offline: bool = False) -> tuple[Supervisor, _Launcher]:
    launcher = _Launcher()
    return Supervisor(RunState(2, title="t", started_at=100.0), _Live(offline), launcher, NullView(),
                      queue.SimpleQueue(), None), launcher


def _say(sup: Supervisor, rank: int, msg: dict, role: str = C.RANK) -> None:
    sup.handle(C.Inbound(rank, role, {"at": 101.0, **msg}))


def _exited(sup: Supervisor, rank: int) -> None:
    _say(sup, rank, {"t": C.EXIT, "code": 0, "signal": None, "stopped": False}, C.AGENT)


def test_a_run_whose_every_rank_returned_and_exited_is_over_before_its_job_ends_and_is_not_cancelled():
    sup, launcher = _supervised()
    _say(sup, 0, {"t": C.RESULT, "value": None})
    assert not sup.finished(102.0)  # rank 1 still runs
    _say(sup, 1, {"t": C.RESULT, "value": None})
    assert sup.released and not sup.finished(102.0)  # their processes are still there
    _exited(sup, 0)
    assert not sup.finished(102.0)
    _exited(sup, 1)
    assert sup.finished(102.0) and sup.state.job_ended_at is None
    sup.wrap_up()
    assert launcher.cancels == 0  # the job ends by itself: the ranks exit once let go
    sup.state.close_out(102.0)
    assert sup.conclude(RunOptions()) is None


def test_a_failed_stopped_or_offline_run_still_waits_for_its_job_to_end():
    sup, launcher = _supervised()
    _say(sup, 0, {"t": C.RESULT, "value": None})
    _say(sup, 1, {"t": C.FAILED, "etype": "ValueError", "summary": "ValueError: bad", "traceback": ""})
    assert not sup.finished(102.0)
    sup.wrap_up()
    assert launcher.cancels == 1
    for offline in (False, True):
        sup, launcher = _supervised(offline)
        if not offline:
            sup.stop("interrupted")
        for rank in (0, 1):
            _say(sup, rank, {"t": C.RESULT, "value": None})
            _exited(sup, rank)
        assert not sup.finished(102.0)


def test_the_job_of_a_run_that_returned_is_seen_to_end_and_cancelled_if_it_does_not(monkeypatch):
    monkeypatch.setattr(rankset, "JOB_END_S", 0.2)
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    inbox.put(C.Inbound(0, C.AGENT, {"t": C.EXIT, "code": 0}))
    inbox.put(C.Inbound(-1, C.BACKEND, {"t": C.JOB_END, "error": None}))
    launcher = _Launcher()
    rankset._see_job_end(inbox, launcher)  # type: ignore[arg-type]
    assert launcher.cancels == 0
    rankset._see_job_end(queue.SimpleQueue(), launcher)  # type: ignore[arg-type]
    assert launcher.cancels == 1

