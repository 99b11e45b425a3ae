"""Unit: messages fold into the run state; the state owns the run's status; snapshots are what views draw."""
import ast
import json
import pathlib
import re
import typing

import pytest

from jupyter_torchdist.core import contract as C
from jupyter_torchdist.core.errors import RunError, RunFailed, RunInterrupted, RunTimeout
from jupyter_torchdist.kernel.state.run import HISTORY_POINTS, RunState
from jupyter_torchdist.views.schema import RunSnapshot

PKG = pathlib.Path(__file__).resolve().parents[2] / "jupyter_torchdist"


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


def test_a_results_loss_curve_is_what_the_rank_reported():
    from jupyter_torchdist.kernel.runs.run import RunResult

    st = _run(2)
    for i in range(3):
        st.apply(1, "rank", {"t": "progress", "step": i + 1, "metrics": {"loss": 2.0 - i}, "at": 100 + i}, 0)
    result = RunResult(None, {}, st)
    assert result.loss_curve(1) == [(1.0, 2.0), (2.0, 1.0), (3.0, 0.0)]
    assert result.loss_curve() == [] and result.loss_curve(7) == []


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
    err = RunFailed("x", st.failures, 3)
    assert err.rank == 1, "a secondary gloo error never outranks a real failure, even if earlier"
    assert "SIGKILL" in err.root.summary and "out of memory" in err.root.summary


def test_earliest_primary_failure_wins():
    st = _run(3)
    st.apply(2, "rank", {"t": "failed", "summary": "ValueError: late", "at": 9.0}, 9.0)
    st.apply(1, "rank", {"t": "failed", "summary": "KeyError: early", "at": 8.0}, 9.5)
    assert RunFailed("x", st.failures, 3).rank == 1


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
    st.close_out(4.0)  # the run ended with rank 0's connection never seen closing
    assert "SIGKILL" in st.failures[0].summary


def test_a_rank_told_to_go_is_said_once_in_the_view_and_its_end_names_the_notice():
    st = RunState(2)
    for at in (5.0, 5.5):   # a second SIGTERM's notice says nothing new
        st.apply(1, "rank", {"t": "preempted", "grace_s": 25.0, "at": at}, at)
    notes = [n for n in st.snapshot()["notices"] if "told to go" in n]
    assert notes == ["rank 1 was told to go (SIGTERM): it exits in 25 s; every rank's jt.preempted() is true, so a "
                     "jt.commit now is what a restart resumes from"]
    st.apply(1, "agent", {"t": "exit", "code": None, "signal": "SIGTERM", "stopped": False, "at": 30.0}, 30.0)
    assert st.failures[1].signal == "SIGTERM" and "told to go (SIGTERM) and ended 25 s later" in st.failures[1].summary


# -- the contract: every message a rank, agent, channel or launcher can send is handled on purpose ------
def _message_types(union) -> dict[str, type]:
    """t -> TypedDict, for each member of a union of the contract's messages (read from its Literal)."""
    out = {}
    for cls in typing.get_args(union):
        (t,) = typing.get_args(typing.get_type_hints(cls)["t"])
        out[t] = cls
    return out


def test_inbound_is_what_the_unions_say_and_each_type_is_one_constant():
    rank, agent = _message_types(C.RankMessage), _message_types(C.AgentMessage)
    channel, backend = _message_types(C.ChannelNotice), _message_types(C.BackendMessage)
    assert C.INBOUND == ({(C.RANK, t) for t in [*rank, *channel]} | {(C.AGENT, t) for t in [*agent, *channel]}
                         | {(C.BACKEND, t) for t in backend})
    assert C.SENDS == {C.RANK: set(rank), C.AGENT: set(agent)}
    outbound = _message_types(C.OutboundMessage)
    constants = {v for k, v in vars(C).items() if k.isupper() and isinstance(v, str) and k not in ("RANK", "BACKEND")}
    every = [*rank, *agent, *channel, *backend, *outbound, *_message_types(C.FilesMessage),
             *_message_types(C.RunnerRequest)]
    assert sorted(every) == sorted(constants), "each message type is one constant, in exactly one union"


def test_every_inbound_message_type_is_folded(monkeypatch):
    """mypy makes the dispatch exhaustive (contract.unhandled takes Never); this checks it at run time too."""
    def unhandled(msg):
        raise AssertionError(f"{msg['t']} reached contract.unhandled")

    monkeypatch.setattr(C, "unhandled", unhandled)
    for role, t in sorted(C.INBOUND):
        st = _run(2)
        st.apply(-1 if t in (C.JOB_END, C.DATA_STATUS) else 1, role, {"t": t}, 1.0)


def test_a_message_its_role_does_not_send_is_ignored():
    st = _run(1)
    st.apply(0, "rank", {"t": C.EXIT, "code": 1, "signal": None, "stopped": False, "at": 1.0}, 1.0)
    st.apply(0, "agent", {"t": C.FAILED, "summary": "forged", "traceback": "", "at": 1.0}, 1.0)
    st.apply(0, "rank", {"t": C.LOST, "summary": "forged"}, 1.0)
    assert not st.failures and st.ranks[0].state == "pending"


# the names the package reads a message through (``opens[r]``: the data service's DATA_OPEN of rank r)
_READERS = re.compile(r"(^|\.)(msg|reply|rdv|final|cell|first|opens\[\w+\])$")


def _fields_read(path: pathlib.Path) -> list[tuple[str, int]]:
    """Literal keys read from a message: ``msg["k"]``, ``msg.get("k")`` (also ``ev.msg``, ``reply``...)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            owner, key = node.value, node.slice.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and isinstance(node.args[0], ast.Constant)):
            owner, key = node.func.value, node.args[0].value
        else:
            continue
        if isinstance(key, str) and _READERS.search(ast.unparse(owner)):
            found.append((key, node.lineno))
    return found


def test_every_field_read_from_a_message_is_declared():
    """mypy checks ``msg["k"]`` on a typed message, but not the key of ``msg.get("k")`` (it types a wrong one
    as object): no module reads a field that no message of the contract declares."""
    declared = {"rank"} | {k for union in (C.InboundMessage, C.OutboundMessage, C.FilesMessage)
                           for cls in typing.get_args(union) for k in typing.get_type_hints(cls)}
    unknown = [f"{p.relative_to(PKG)}:{line}: {key}" for p in PKG.rglob("*.py")
               for key, line in _fields_read(p) if key not in declared]
    assert not unknown, unknown


def _message_types_built_in(path: pathlib.Path) -> list[tuple[str, int]]:
    """Every ``{"t": X, ...}`` dict literal in a module: X as written (a contract name, or a string literal)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value == "t":
                    text = f"C.{value.attr}" if isinstance(value, ast.Attribute) else ast.unparse(value)
                    found.append((text, node.lineno))
    return found


def test_messages_are_built_from_the_contract_only():
    """No module spells a message type as a string: the vocabulary lives in the contract (core/contract/) alone."""
    loose = [f"{p.relative_to(PKG)}:{line}: {t}" for p in PKG.rglob("*.py") if p.parent.name != "contract"
             for t, line in _message_types_built_in(p) if not t.startswith("C.")]
    assert not loose, loose


def test_what_each_side_sends_is_declared_for_that_side():
    # a kept rank's first cell comes in its plan: the rank makes that CELL message itself
    # a rank's host fetches the run's code over a files connection of its own; the channel answers it
    allowed = {"rank": C.RANK_SENDS | {C.RENDEZVOUS, C.CELL, C.FETCH},
               "channel": C.CHANNEL_SAYS | {C.LOST, C.STOPPED, C.STOP, C.BLOB}}
    names = {v: k for k, v in vars(C).items() if isinstance(v, str) and k.isupper()}
    for side, types in allowed.items():
        for path in (PKG / side).rglob("*.py"):
            for t, line in _message_types_built_in(path):
                value = getattr(C, t[2:], None)
                assert value in types | C.AGENT_SENDS | {C.STOP}, f"{path.name}:{line} sends {names.get(value, t)}"


def test_dropped_log_lines_reach_the_snapshot_as_a_notice():
    st = _run(2)
    st.apply(1, "rank", {"t": C.DROPPED, "log_lines": 12345, "log_bytes": 999, "progress": 3}, 1.0)
    st.apply(1, "rank", {"t": C.DROPPED, "log_lines": 100, "log_bytes": 9, "progress": 3}, 1.1)  # late, smaller
    snap = st.snapshot()
    assert snap["ranks"][1]["log_dropped"] == 12345
    assert snap["notices"] == ["rank 1: 12,345 log lines past the budget were dropped"]


def test_snapshot_has_exactly_the_schema_fields():
    snap = _run(1).snapshot()
    assert set(snap) == set(RunSnapshot.__annotations__)


# -- transitions: the state owns the status, testable without a supervisor ------------------------------
def _all_done(st, at=2.0):
    for r in range(st.world_size):
        st.apply(r, "rank", {"t": "result", "repr": str(r), "value": b"x", "at": at}, at)
        st.apply(r, "agent", {"t": "exit", "code": 0, "signal": None, "stopped": False}, at)


def test_conclude_success():
    st = _run(2)
    _all_done(st)
    assert st.conclude(3.0, timeout=None, value_needed=True) is None
    assert st.status == "succeeded" and st.ended_at == 3.0 and st.headline == ""


def test_begin_stop_is_once_and_checks_its_reason():
    st = _run(2)
    assert st.begin_stop("timeout", 5.0) and st.status == "stopping" and st.stop_reason == "timeout"
    assert not st.begin_stop("interrupted", 6.0) and st.stop_reason == "timeout"
    with pytest.raises(ValueError):
        _run().begin_stop("bored", 1.0)


def test_timeout_and_interrupt_conclude_with_their_errors():
    st = _run(2)
    st.begin_stop("timeout", 5.0)
    st.close_out(6.0)
    err = st.conclude(6.0, timeout=4.0, value_needed=True)
    assert isinstance(err, RunTimeout) and st.status == "timeout"
    assert "timed out after 4 s" in st.headline and "[0, 1]" in st.headline
    st = _run(2)
    st.begin_stop("interrupted", 5.0)
    st.close_out(6.0)
    assert isinstance(st.conclude(6.0, timeout=None, value_needed=True), RunInterrupted)
    assert st.status == "interrupted" and [r.state for r in st.ranks] == ["stopped", "stopped"]


def test_close_out_marks_unheard_ranks_lost_with_the_jobs_error():
    st = _run(2)
    st.apply(0, "rank", {"t": "result", "repr": "1", "value": b"x"}, 1.0)
    st.apply(0, "agent", {"t": "exit", "code": 0, "signal": None}, 1.0)
    st.apply(-1, "backend", {"t": C.JOB_END, "error": "executor lost\nmore"}, 2.0)
    st.close_out(3.0)
    err = st.conclude(3.0, timeout=None, value_needed=True)
    assert isinstance(err, RunFailed) and err.rank == 1 and err.root.summary == "executor lost"


def test_reject_value_turns_a_result_into_a_failure():
    st = _run(1)
    st.apply(0, "rank", {"t": "result", "repr": "1", "value": b"x"}, 1.0)
    st.reject_value(0, "could not be unpickled here", 1.5)
    assert st.ranks[0].state == "failed" and st.value_repr is None
    assert isinstance(st.conclude(2.0, timeout=None, value_needed=True), RunFailed)


def test_a_missing_value_is_a_failure_when_it_is_needed():
    st = _run(1)
    st.apply(0, "rank", {"t": "failed", "summary": "x"}, 1.0)
    st = _run(1)
    st.apply(0, "agent", {"t": "exit", "code": 0, "signal": None}, 1.0)  # an exit without a result: lost
    err = st.conclude(2.0, timeout=None, value_needed=True)
    assert isinstance(err, RunFailed) and err.rank == 0


def test_echoes_only_are_not_crowned_as_the_root_cause():
    """When every failure reads like a peer's echo, the headline says the group could not form."""
    st = _run(4)
    st.apply(2, "rank", {"t": "failed", "summary": "RuntimeError: Gloo connectFullMesh failed ... "
                                                   "Connection closed by peer", "at": 1.0}, 1.0)
    st.apply(3, "rank", {"t": "failed", "summary": "RuntimeError: timed out connecting: SO_ERROR: "
                                                   "Connection refused", "at": 1.1}, 1.1)
    err = st.conclude(2.0, timeout=None, value_needed=True)
    assert isinstance(err, RunFailed)
    assert "could not form or keep the process group" in err.headline and "failed first" not in err.headline
    assert "[2, 3]" in err.headline


def test_run_failed_refuses_an_empty_failure_map():
    with pytest.raises(ValueError):
        RunFailed("nothing failed", {}, 2)
    assert isinstance(RunTimeout("t", {}, 2), RunError)  # a timeout may stop healthy ranks only


def test_ranks_started_one_by_one_are_waited_for_then_said_by_rank():
    st = _run(3)
    st.start_by, st.start_hint = 130.0, "what to do"
    st.apply(0, "rank", {"t": "hello", "host": "h", "pid": 1}, 101.0)
    st.now = 101.0
    assert not any("waiting for executors" in n for n in st.notices())  # not in the first seconds
    st.now = 114.4
    assert st.notices()[0] == "waiting for executors: 1 of 3 ranks started, 14 s of up to 30 s"
    assert not st.start_overdue(129.9) and st.start_overdue(130.0)
    st.fail_unstarted(130.0)
    assert sorted(st.failures) == [1, 2] and st.failures[1].kind == "launch"
    assert st.failures[1].summary == "never started: no task slot came for its task within 30 s (1 of 3 ranks started)"
    assert st.failures[1].traceback == "what to do" and st.failures[1].label() == "rank 1"
    assert not st.start_overdue(200.0) and not any("waiting" in n for n in st.notices())
    error = st.conclude(131.0, timeout=None, value_needed=True)
    assert isinstance(error, RunFailed) and error.headline.startswith("rank 1 failed first: never started")


def test_a_start_bound_is_met_once_every_rank_said_hello():
    st = _run(2)
    st.start_by = 110.0
    for r in range(2):
        st.apply(r, "rank", {"t": "hello", "host": "h", "pid": 1}, 101.0)
    st.now = 105.0
    assert not st.start_overdue(120.0) and not any("waiting" in n for n in st.notices())


def test_a_rank_that_goes_silent_after_its_heartbeats_began_is_lost_by_name():
    st = _run(2)
    for r in range(2):
        st.apply(r, "rank", {"t": "hello", "host": f"h{r}", "ip": f"10.0.0.{r + 1}", "pid": 1}, 100.0)
        st.apply(r, "rank", {"t": "state", "state": "running"}, 100.1)
    assert not st.lose_silent(200.0, 15.0)  # no heartbeat yet (rendezvous, the group forming): never judged
    for r in range(2):
        st.apply(r, "rank", {"t": "usage", "at": 101.0, "rss": 1}, 101.0)
    st.apply(0, "rank", {"t": "log", "stream": "stdout", "text": "x\n"}, 120.0)  # any word counts
    assert not st.lose_silent(115.9, 15.0)
    assert st.lose_silent(116.0, 15.0) and list(st.failures) == [1]
    failure = st.failures[1]
    assert failure.kind == "lost" and failure.label() == "rank 1 on h1 (10.0.0.2)"
    assert failure.summary.startswith("lost: no word from it for 15 s")
    assert not st.lose_silent(130.0, 15.0) and list(st.failures) == [1]  # judged once; rank 0 spoke at 120


def test_a_kept_cell_judges_silence_from_when_each_rank_was_last_heard_between_cells():
    st = _run(2)
    st.begin_cell(2, {0: ("h0", 1), 1: ("h1", 2)}, 200.0, heard={0: 199.5, 1: 185.0})
    assert st.lose_silent(200.0, 10.0) and list(st.failures) == [1]  # silent since 185: lost at once
    assert st.failures[1].summary.startswith("lost: no word from it for 15 s")
    fresh = _run(2)
    fresh.begin_cell(2, {0: ("h0", 1), 1: ("h1", 2)}, 200.0)
    assert not fresh.lose_silent(400.0, 10.0)  # nothing known of their heartbeat: never judged


def test_only_hosts_whose_ranks_went_silent_while_others_were_heard_are_given_up():
    st = _run(3)
    for r, ip in enumerate(["10.0.0.1", "10.0.0.2", "10.0.0.2"]):
        st.apply(r, "agent", {"t": "agent", "host": f"h{r}", "pid": 1, "child": 2}, 100.0)
        st.apply(r, "rank", {"t": "hello", "host": f"h{r}", "ip": ip, "pid": 2}, 100.0)
    st.apply(0, "agent", {"t": "beat"}, 109.0)  # only rank 0's host still says something
    silent = st.lose_silent(110.0, 10.0)
    assert [rs.rank for rs in silent] == [1, 2] and st.lost_hosts(silent) == {"10.0.0.2"}
    everyone = _run(2)
    for r in range(2):
        everyone.apply(r, "agent", {"t": "agent", "host": "h", "pid": 1, "child": 2}, 100.0)
        everyone.apply(r, "rank", {"t": "hello", "host": f"h{r}", "ip": f"10.0.0.{r + 1}", "pid": 2}, 100.0)
    gone = everyone.lose_silent(111.0, 10.0)
    assert len(gone) == 2 and everyone.lost_hosts(gone) == set()  # nothing heard at all: maybe our side's fault


def test_a_peers_echo_after_the_users_stop_is_that_rank_stopped_not_the_runs_root_cause():
    """Seen in CI (tests/browser/test_stacks.py): Stop killed rank 1 first, and rank 0, waiting in all_reduce, raised
    gloo's "Connection closed by peer" before its own kill came; the report named that traceback the root cause and
    said rank 0 had "failed" instead of where it was. After a failure's stop, the same echo stays a failure."""
    echo = {"t": "failed", "summary": "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer "
            "[127.0.0.1]:3717", "traceback": "", "at": 11.0}
    for reason in ("interrupted", "timeout"):
        st = RunState(2, title="t", started_at=0.0)
        st.apply(0, "rank", {"t": "state", "state": "running"}, 1.0)
        st.begin_stop(reason, 10.0)
        st.apply(0, "rank", echo, 11.0)
        assert st.ranks[0].state == "stopped" and not st.failures, reason
    st = RunState(2, title="t", started_at=0.0)
    st.apply(1, "rank", {"t": "failed", "summary": "ValueError: bad", "traceback": "", "at": 9.0}, 9.0)
    st.begin_stop("failed", 10.0)
    st.apply(0, "rank", echo, 11.0)
    assert st.ranks[0].state == "failed" and st.failures[0].secondary and not st.failures[1].secondary
