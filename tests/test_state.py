"""Unit: messages fold into the run state; snapshots are what views draw."""
import json

from jupyter_torchdist.errors import RunFailed
from jupyter_torchdist.state import HISTORY_POINTS, RunState


def _run(n=2):
    return RunState(n, title="t", started_at=100.0)


def test_lifecycle_to_done():
    st = _run()
    for r in range(2):
        st.apply(r, "rank", {"t": "hello", "host": "h", "pid": 1}, 100.1)
        st.apply(r, "rank", {"t": "state", "state": "running"}, 100.2)
    assert st.status == "running" and st.ranks[0].state == "running" and st.ranks[0].host == "h"
    st.apply(0, "rank", {"t": "result", "repr": "[1, 2]", "at": 101.0}, 101.0)
    assert st.ranks[0].state == "done" and st.value_repr == "[1, 2]"
    assert not st.settled  # the agent has not confirmed the exit yet
    for r in range(2):
        st.apply(r, "rank", {"t": "result", "at": 101.0}, 101.0)
        st.apply(r, "agent", {"t": "exit", "code": 0, "signal": None}, 101.1)
    assert st.settled and not st.failures


def test_progress_rate_metrics_and_loss_history():
    st = _run(1)
    for i in range(0, 50):
        st.apply(0, "rank", {"t": "progress", "step": i, "total": 50, "metrics": {"loss": 1.0 / (i + 1),
                                                                                  "lr": 0.1}, "at": 100 + i * 0.1}, 0)
    r = st.ranks[0]
    assert (r.step, r.total) == (49, 50)
    assert r.rate is not None and 9.0 < r.rate < 11.0
    assert r.metrics == {"loss": 1.0 / 50, "lr": 0.1}
    assert len(r.history) == 50 and r.history[0] == (0.0, 1.0)


def test_history_is_bounded_but_keeps_the_whole_curve():
    st = _run(1)
    for i in range(HISTORY_POINTS * 5):
        st.apply(0, "rank", {"t": "progress", "step": i, "metrics": {"loss": float(i)}}, 0)
    hist = st.ranks[0].history
    assert len(hist) <= HISTORY_POINTS and hist[0][0] == 0.0 and hist[-1][0] > HISTORY_POINTS * 4


def test_hard_exit_and_exception_failures_and_root_cause():
    st = _run(3)
    st.apply(0, "rank", {"t": "failed", "summary": "RuntimeError: Connection closed by peer", "at": 5.0}, 5.0)
    st.apply(1, "agent", {"t": "exit", "code": None, "signal": "SIGKILL", "at": 5.1}, 5.1)
    st.apply(2, "agent", {"t": "exit", "code": None, "signal": "SIGKILL", "stopped": True}, 5.2)
    assert st.ranks[2].state == "stopped" and 2 not in st.failures
    err = RunFailed(st.failures, 3)
    assert err.rank == 1, "a secondary gloo error never outranks a real failure, even if earlier"
    assert "SIGKILL" in err.root.summary and "out of memory" in err.root.summary


def test_earliest_primary_failure_wins():
    st = _run(3)
    st.apply(2, "rank", {"t": "failed", "summary": "ValueError: late", "at": 9.0}, 9.0)
    st.apply(1, "rank", {"t": "failed", "summary": "KeyError: early", "at": 8.0}, 9.5)
    assert RunFailed(st.failures, 3).rank == 1


def test_logs_bounded_tail_in_snapshot_and_json():
    st = _run(1)
    for i in range(1000):
        st.apply(0, "rank", {"t": "log", "stream": "stdout" if i % 2 else "stderr", "text": f"line {i}"}, 0)
    snap = st.snapshot(log_tail=10)
    r = snap["ranks"][0]
    assert r["log_lines"] == 1000 and len(r["log_tail"]) == 10 and r["log_tail"][-1] == ["stdout", "line 999"]
    assert r["last_line"] == "line 999"
    json.dumps(snap)  # JSON-able for the report and the front end


def test_unknown_messages_are_ignored():
    st = _run(1)
    st.apply(0, "rank", {"t": "no-such-thing"}, 0)
    st.apply(0, "rank", {"t": "progress", "step": "x", "metrics": "y"}, 0)
    assert st.ranks[0].step is None and st.ranks[0].state == "pending"


def test_agent_exit_before_the_ranks_own_result_does_not_fail_it():
    """The agent's and the rank's sockets are read by different threads: the exit may come first."""
    st = RunState(1)
    st.apply(0, "rank", {"t": "connected"}, 1.0)
    st.apply(0, "agent", {"t": "exit", "code": 0, "signal": None, "stopped": False, "at": 2.0}, 2.0)
    assert st.ranks[0].state != "failed" and not st.failures
    st.apply(0, "rank", {"t": "result", "value": None, "repr": "1", "at": 1.9}, 2.1)
    st.apply(0, "rank", {"t": "disconnected"}, 2.2)
    assert st.ranks[0].state == "done" and not st.failures and st.settled


def test_agent_exit_is_a_failure_once_the_ranks_connection_drains_without_a_result():
    st = RunState(2)
    st.apply(1, "rank", {"t": "connected"}, 1.0)
    st.apply(1, "agent", {"t": "exit", "code": 7, "signal": None, "stopped": False, "at": 2.0}, 2.0)
    assert not st.failures
    st.apply(1, "rank", {"t": "disconnected"}, 2.1)
    assert st.failures[1].kind == "exit" and "exited with code 7" in st.failures[1].summary
    st.apply(0, "rank", {"t": "connected"}, 1.0)
    st.apply(0, "agent", {"t": "exit", "code": None, "signal": "SIGKILL", "stopped": False, "at": 3.0}, 3.0)
    st.settle_pending_exits()  # the run ended with rank 0's connection never seen closing
    assert "SIGKILL" in st.failures[0].summary
