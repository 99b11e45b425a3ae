"""Unit: a sweep's rule stopping a member early. The stop says so (``early``), and it is moot for a member whose every
rank has taken its last step, or returned, by the time it lands: that member ends done, with its value. The user's
own stop is never moot."""
import queue

from jupyter_torchdist.core import contract as C
from jupyter_torchdist.core.errors import RunInterrupted
from jupyter_torchdist.core.options import RunOptions
from jupyter_torchdist.kernel.runs.history import new_run
from jupyter_torchdist.kernel.state.run import RunState


def _run(n=2):
    return RunState(n, title="t", started_at=100.0)


def _member():
    """A background run as a sweep's member is, in the kernel's registry."""
    return new_run("%%distribute -n 2 --background", RunOptions(background=True), None)


def test_a_sweeps_stop_says_early_and_the_users_own_stop_after_it_does_not():
    member = _member()
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    member.attach(inbox)
    assert member.end_early("stopped_early", "ASHA at step 4") is True
    assert inbox.get_nowait().msg == {"t": C.STOP_WANTED, "by": "the sweep (ASHA at step 4)", "early": True}
    member.stop()
    assert "early" not in inbox.get_nowait().msg   # the user's stop is never moot
    failing = _member()
    failing.attach(inbox)
    failing.end_early("failed", "loss never came")
    assert "early" not in inbox.get_nowait().msg   # a member failed for its metric is stopped whatever its steps
    for run in (member, failing):   # ended, as their drivers would: no later test counts them as running
        run.finish(None, None, RunInterrupted("stopped"))


def test_a_sweeps_early_stop_is_moot_once_every_rank_took_its_last_step_or_returned():
    """A rule's stop (``early``) that reaches the run after its ranks took their last step stops nothing; one that
    reached ranks still stepping stops the run, unless every rank's result came back all the same. The user's own stop
    is never moot."""
    st = _run(2)
    st.apply(0, "rank", {"t": "progress", "step": 6, "total": 6}, 1.0)
    assert not st.took_every_step()   # rank 1 has said nothing yet
    st.apply(1, "rank", {"t": "progress", "step": 5, "total": 6}, 1.0)
    assert not st.took_every_step()
    st.apply(1, "rank", {"t": "progress", "step": 6, "total": 6}, 1.1)
    assert st.took_every_step()
    for early, want in ((True, None), (False, RunInterrupted)):
        st = _run(2)
        st.apply(-1, "backend", {"t": "stop_wanted", "by": "the sweep (ASHA)", "early": early}, 1.0)
        assert st.stopped_early is early and st.begin_stop("interrupted", 1.0)
        for r in range(2):   # each rank had sent its result before the stop reached it
            st.apply(r, "rank", {"t": "result", "at": 1.1}, 1.1)
        st.close_out(2.0)
        err = st.conclude(2.0, timeout=None, value_needed=False)
        assert (err is None) if want is None else isinstance(err, want), err
    st = _run(2)   # a rule's stop, then the user's: the user's counts
    st.apply(-1, "backend", {"t": "stop_wanted", "by": "the sweep (ASHA)", "early": True}, 1.0)
    st.apply(-1, "backend", {"t": "stop_wanted", "by": "the sweep (ASHA)"}, 1.0)
    assert not st.stopped_early
    st = _run(2)   # ranks stopped mid-step: the rule's stop stands
    st.apply(-1, "backend", {"t": "stop_wanted", "by": "the sweep (ASHA)", "early": True}, 1.0)
    st.begin_stop("interrupted", 1.0)
    st.apply(0, "rank", {"t": "result", "at": 1.1}, 1.1)
    st.close_out(2.0)
    assert isinstance(st.conclude(2.0, timeout=None, value_needed=False), RunInterrupted)


class _Agents:
    """The channel's side a supervisor talks to: who was told to stop."""

    def __init__(self) -> None:
        self.stopped: list[str] = []

    def send(self, rank, role, msg) -> bool:
        return True

    def stop_all(self, reason, spare=frozenset()) -> set[int]:
        self.stopped.append(reason)
        return {0, 1} - set(spare)


class _Launcher:
    def cancel(self) -> None:
        pass


def _supervised():
    from jupyter_torchdist.kernel.runs.supervisor import Supervisor
    from jupyter_torchdist.views import NullView

    agents = _Agents()
    return Supervisor(_run(2), agents, _Launcher(), NullView(), queue.SimpleQueue(), None), agents


def _step(sup, rank, step, total):
    sup.handle(C.Inbound(rank, C.RANK, {"t": C.PROGRESS, "step": step, "total": total}))


def test_a_held_early_stop_stops_a_member_whose_ranks_step_on():
    """A rule's stop that lands after every rank's last step is held, not dropped: a loop whose ``total`` counts one
    epoch's steps goes on to step 1 of the next, and the held stop then stops it."""
    early = C.Inbound(-1, C.BACKEND, {"t": C.STOP_WANTED, "by": "the sweep (ASHA)", "early": True})
    sup, agents = _supervised()
    for rank in (0, 1):
        _step(sup, rank, 6, 6)
    sup.handle(early)
    assert sup.state.stop_reason is None and not agents.stopped   # moot so far: the ranks only have to return
    _step(sup, 0, 1, 6)   # ... but rank 0 began another epoch
    assert sup.state.stop_reason == "interrupted" and agents.stopped and sup.state.stopped_early
    sup, agents = _supervised()
    _step(sup, 0, 6, 6)
    _step(sup, 1, 5, 6)
    sup.handle(early)   # rank 1 has a step to go: stopped at once
    assert sup.state.stop_reason == "interrupted" and agents.stopped
