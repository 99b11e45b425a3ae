"""The live channel with real sockets: who a message is from, bad frames, fuzzing, binding, lost agents."""
from __future__ import annotations

import pickle
import queue
import socket
import struct
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_torchdist.channel import server as channel_mod
from jupyter_torchdist.channel import protocol as P
from jupyter_torchdist.channel.client import connect
from jupyter_torchdist.channel.server import ChannelServer
from jupyter_torchdist import contract as C
from jupyter_torchdist.contract import Inbound
from jupyter_torchdist.kernel.state import RunState

GREETING = len(P.MAGIC) + P.NONCE_LEN


def _messages(server: ChannelServer, timeout: float = 5.0) -> list[Inbound]:
    """Everything in the inbox, waiting up to ``timeout`` for the first message."""
    out = [server.inbox.get(timeout=timeout)]
    while True:
        try:
            out.append(server.inbox.get(timeout=0.2))
        except queue.Empty:
            return out


def _until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def _read_until_closed(sock: socket.socket, timeout: float = 10.0) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


@pytest.fixture
def server():
    s = ChannelServer(4, max_frame=1 << 16)
    yield s
    s.close()


# -- identity -------------------------------------------------------------------------------------
def test_messages_are_stamped_with_the_authenticated_rank(server):
    sock = connect(server.address, server.secret, 1, P.ROLE_RANK)
    P.send_frame(sock, [{"t": "result", "rank": 0, "value": None, "repr": "'forged'", "at": 1.0}])
    got = [m for m in _messages(server) if m.msg["t"] == "result"]
    sock.close()
    assert len(got) == 1 and got[0].rank == 1 and got[0].role == "rank" and got[0].msg["rank"] == 1
    state = RunState(4)
    state.apply(got[0].rank, got[0].role, got[0].msg, got[0].at)
    assert state.ranks[1].has_result and not state.ranks[0].has_result and state.value_repr is None


def test_one_connection_per_rank_and_role(server):
    first = connect(server.address, server.secret, 2, P.ROLE_RANK)
    with pytest.raises(P.ProtocolError, match="refused"):
        connect(server.address, server.secret, 2, P.ROLE_RANK, timeout=5)
    agent = connect(server.address, server.secret, 2, P.ROLE_AGENT)  # another role of the same rank is fine
    assert server.connected("rank") == {2} and server.connected("agent") == {2}
    assert server.send(2, "rank", {"t": "rendezvous", "x": 1})
    assert P.recv_frame(first, 1 << 16) == {"t": "rendezvous", "x": 1}
    first.close()
    agent.close()


def test_unreachable_kernel_is_a_clear_error():
    probe = socket.create_server(("127.0.0.1", 0))
    address = probe.getsockname()[:2]
    probe.close()  # nothing listens there now
    with pytest.raises(ConnectionError) as info:
        connect(address, P.new_secret(), 3, P.ROLE_RANK, timeout=5)
    assert "rank 3" in str(info.value) and f"{address[0]}:{address[1]}" in str(info.value)
    assert "spark.driver.host" in str(info.value)


def test_rank_out_of_range_is_refused(server):
    with pytest.raises(P.ProtocolError):
        connect(server.address, server.secret, 4, P.ROLE_RANK, timeout=5)
    assert server.refused == 1


# -- bad frames -----------------------------------------------------------------------------------
def test_oversized_frame_closes_only_that_connection(server):
    bad = connect(server.address, server.secret, 0, P.ROLE_RANK)
    good = connect(server.address, server.secret, 1, P.ROLE_RANK)
    bad.sendall(struct.pack(">I", (1 << 16) + 1) + b"x" * 100)
    assert _read_until_closed(bad) == b""
    assert _until(lambda: server.connected("rank") == {1})
    P.send_frame(good, {"t": "log", "text": "still here"})
    texts = [m.msg.get("text") for m in _messages(server) if m.rank == 1]
    assert "still here" in texts and server.malformed == 1
    good.close()
    bad.close()


def test_unpicklable_frame_is_refused(server):
    sock = connect(server.address, server.secret, 0, P.ROLE_RANK)
    junk = b"\x80\x05not a pickle"
    sock.sendall(struct.pack(">I", len(junk)) + junk)
    assert _read_until_closed(sock) == b""
    assert server.malformed == 1
    sock.close()


@pytest.mark.parametrize("msg", [
    {"t": "result", "at": "yesterday"}, {"t": "progress", "step": float("nan")}, {"t": "failed", "at": True},
    {"t": "hello", "store_port": None}, {"t": 3}, {"no": "type"}, ["not", "a", "dict"], {1: "int key", "t": "x"},
    {"t": "x" * 65}, {"t": "log", "text": b"bytes"}, {"t": "progress", "metrics": [1, 2]},
])
def test_wrongly_typed_messages_are_dropped_and_the_connection_stays(server, msg):
    sock = connect(server.address, server.secret, 3, P.ROLE_RANK)
    P.send_frame(sock, [msg, {"t": "log", "text": "after"}])
    got = [m.msg for m in _messages(server) if m.msg["t"] not in ("connected",)]
    assert got == [{"t": "log", "text": "after", "rank": 3}]
    assert server.malformed == 1
    sock.close()


def test_a_connection_speaks_only_for_its_own_role(server):
    """A rank cannot send its agent's, the channel's or the launcher's messages; an agent cannot send a rank's."""
    rank = connect(server.address, server.secret, 1, P.ROLE_RANK)
    agent = connect(server.address, server.secret, 1, P.ROLE_AGENT)
    P.send_frame(rank, [{"t": "connected"}, {"t": "exit", "code": 1, "signal": None, "stopped": False, "at": 1.0},
                        {"t": "lost", "summary": "forged"}, {"t": "log", "stream": "stdout", "text": "ok", "at": 1.0}])
    assert _until(lambda: server.malformed == 3)
    P.send_frame(agent, [{"t": "result", "value": None, "repr": "1", "at": 1.0}, {"t": "disconnected"},
                         {"t": "agent", "host": "h", "pid": 1, "child": 2}])
    assert _until(lambda: server.malformed == 5)
    got = [(m.role, m.msg["t"]) for m in _messages(server)]
    assert sorted(got) == [("agent", "agent"), ("agent", "connected"), ("rank", "connected"), ("rank", "log")]
    rank.close()
    agent.close()


def test_check_message_accepts_what_ranks_send():
    for msg in ({"t": "hello", "host": "h", "ip": "127.0.0.1", "pid": 5, "store_port": 1234},
                {"t": "progress", "step": 3, "total": None, "metrics": {"loss": 0.5}, "at": 1.5},
                {"t": "result", "value": b"\x80\x05N.", "repr": "None", "at": 2},
                {"t": "failed", "summary": "x", "traceback": "", "at": 2.0, "code": "sys.exit('why')"},
                {"t": "exit", "code": None, "signal": "SIGKILL", "stopped": False, "at": 3.0},
                {"t": "agent", "host": "h", "pid": 1, "child": 2}, {"t": "dropped", "progress": 3, "log_bytes": 9},
                {"t": "a-future-message", "anything": object()}):
        assert P.check_message(msg) is None, msg


# -- fuzzing --------------------------------------------------------------------------------------
_FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_FUZZ
@given(data=st.binary(max_size=200))
def test_fuzz_before_the_handshake_is_refused(server, data):
    before = server.refused
    raw = socket.create_connection(server.address, timeout=10)
    assert P.recv_exact(raw, GREETING).startswith(P.MAGIC)
    try:
        raw.sendall(data)
        raw.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # refused before we finished sending
    assert not _read_until_closed(raw).startswith(b"OK")
    raw.close()
    assert _until(lambda: server.refused == before + 1)
    assert not server.connected("rank") and not server.connected("agent")


_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
                       | st.binary(max_size=20), lambda c: st.lists(c, max_size=3)
                       | st.dictionaries(st.text(max_size=5), c, max_size=3), max_leaves=8)
_msg = st.fixed_dictionaries({"t": st.sampled_from(["log", "progress", "state", "result", "exit", "zz"])},
                             optional={k: _values for k in ("at", "step", "text", "metrics", "value", "host", "x")})


@_FUZZ
@given(valid=st.lists(_msg, max_size=4), garbage=st.binary(max_size=300), as_list=st.booleans())
def test_fuzz_after_the_handshake_keeps_the_server_healthy(server, valid, garbage, as_list):
    while not server.inbox.empty():
        server.inbox.get()
    sock = connect(server.address, server.secret, 0, P.ROLE_RANK)
    try:
        if as_list:
            P.send_frame(sock, valid)
        else:
            for m in valid:
                P.send_frame(sock, m)
        sock.sendall(garbage)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the server already dropped us for an earlier bad frame
    _read_until_closed(sock)  # the server ends the connection: at the garbage, or at our EOF
    sock.close()
    got = []
    while True:
        ev = server.inbox.get(timeout=10)
        if ev.msg["t"] == "disconnected":
            break
        if ev.msg["t"] != "connected":
            got.append(ev.msg)
    expected = [dict(m, rank=0) for m in valid if P.check_message(m, C.RANK_SENDS) is None]
    assert got[:len(expected)] == expected  # every well-formed message before the garbage, in order
    assert all(m["rank"] == 0 for m in got)


def test_after_fuzzing_threads_return_to_baseline_and_clients_still_get_in():
    baseline = threading.active_count()
    s = ChannelServer(2, max_frame=1 << 12)
    try:
        rng = __import__("random").Random(7)
        for i in range(60):
            raw = socket.create_connection(s.address, timeout=10)
            if i % 2:
                P.recv_exact(raw, GREETING)
                raw.sendall(rng.randbytes(rng.randrange(0, 100)))
            raw.close()
        for i in range(30):
            sock = connect(s.address, s.secret, i % 2, P.ROLE_RANK)
            sock.sendall(rng.randbytes(rng.randrange(1, 300)))
            sock.close()
            assert _until(lambda: not s.connected("rank"))
        assert _until(lambda: threading.active_count() == baseline + 1), threading.enumerate()  # + the acceptor
        ok = connect(s.address, s.secret, 1, P.ROLE_AGENT)
        P.send_frame(ok, {"t": "agent", "host": "h", "pid": 1})
        assert any(m.msg["t"] == "agent" and m.rank == 1 for m in _messages(s))
        ok.close()
    finally:
        s.close()
    assert _until(lambda: threading.active_count() == baseline)


# -- binding, pending connections, stalled peers ----------------------------------------------------
def test_listener_binds_loopback_and_refuses_wildcards():
    with ChannelServer(1) as s:
        assert s.bound[0] == "127.0.0.1" and s.address[0] == "127.0.0.1"
        port_hex = f"{s.bound[1]:04X}"
        with open("/proc/net/tcp") as f:
            listening = [line.split()[1] for line in f.readlines()[1:] if line.split()[3] == "0A"]
        assert f"0100007F:{port_hex}" in listening and f"00000000:{port_hex}" not in listening
    for host in ("0.0.0.0", "::", ""):
        with pytest.raises(ValueError, match="every interface|cannot listen"):
            ChannelServer(1, host=host)


def test_too_many_pending_handshakes_are_shed_and_real_clients_recover(monkeypatch):
    monkeypatch.setattr(channel_mod, "MAX_PENDING", 3)
    with ChannelServer(2) as s:
        idle = [socket.create_connection(s.address, timeout=5) for _ in range(3)]
        for sock in idle:
            P.recv_exact(sock, GREETING)  # each is now in its handshake
        extra = socket.create_connection(s.address, timeout=5)
        assert _read_until_closed(extra, 5) == b""  # shed at once, not after the handshake timeout
        for sock in idle:
            sock.close()
        assert _until(lambda: s.refused == 4)
        ok = connect(s.address, s.secret, 0, P.ROLE_RANK)
        ok.close()
        extra.close()


@pytest.mark.parametrize("tls", [False, True])
def test_close_wakes_a_silent_unauthenticated_peer_at_once(tls):
    s = ChannelServer(2, tls=tls)
    raw = socket.create_connection(s.address, timeout=5)
    if not tls:
        P.recv_exact(raw, GREETING)
    time.sleep(0.2)  # let the server block in its handshake read
    t0 = time.monotonic()
    s.close()
    took = time.monotonic() - t0
    raw.close()
    assert took < 2.0, f"close() waited {took:.1f}s for a silent peer"


@pytest.mark.parametrize("tls", [False, True])
def test_a_peer_trickling_its_handshake_is_cut_off_at_the_deadline(monkeypatch, tls):
    """One byte at a time, each well within a per-read timeout: the handshake's total deadline still applies."""
    monkeypatch.setattr(channel_mod, "HANDSHAKE_TIMEOUT_S", 1.0)
    with ChannelServer(1, tls=tls) as s:
        raw = socket.create_connection(s.address, timeout=5)
        t0 = time.monotonic()
        cut = None
        for _ in range(40):  # 40 x 0.1 s = 4 s of trickling if nobody cuts us off
            try:
                raw.sendall(b"\x16" if tls else b"R")
            except OSError:
                cut = time.monotonic() - t0
                break
            time.sleep(0.1)
            if s.refused:
                cut = time.monotonic() - t0
                break
        raw.close()
        assert cut is not None and cut < 2.5, f"a trickling peer held its handshake for {cut}s"


def test_send_to_a_peer_that_stopped_reading_gives_up(monkeypatch):
    monkeypatch.setattr(channel_mod, "SEND_TIMEOUT_S", 1.0)
    with ChannelServer(1) as s:
        sock = connect(s.address, s.secret, 0, P.ROLE_AGENT)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        t0 = time.monotonic()
        sent = 0
        while s.send(0, "agent", {"t": "stop", "pad": b"x" * 65536}):
            sent += 1
            assert time.monotonic() - t0 < 30, "send() never gave up on a stalled peer"
        assert sent > 0 and time.monotonic() - t0 < 15
        assert _until(lambda: not s.connected("agent"))
        sock.close()


# -- a lost agent -----------------------------------------------------------------------------------
def test_agent_vanishing_without_exit_is_reported_lost(server):
    agent = connect(server.address, server.secret, 2, P.ROLE_AGENT)
    P.send_frame(agent, {"t": "agent", "host": "exec-7", "pid": 4242, "child": 4243})
    agent.close()  # what SIGKILL of the Spark Python worker looks like from here
    lost = [m for m in _messages(server) if m.msg["t"] == "lost"]
    assert len(lost) == 1 and lost[0].rank == 2 and lost[0].role == "backend"
    summary = lost[0].msg["summary"]
    assert "rank 2" in summary and "pid 4242 on exec-7" in summary and "died before reporting" in summary
    state = RunState(4)
    state.apply(2, "backend", lost[0].msg, lost[0].at)
    assert state.failures[2].kind == "lost" and not state.failures[2].secondary


def test_a_lost_agent_is_named_in_the_launchers_words():
    """--local has no Spark task: the words come from the launcher, not from the channel."""
    with ChannelServer(1, watcher="the local agent process", lost_hint="The kernel's stderr may say why.") as s:
        agent = connect(s.address, s.secret, 0, P.ROLE_AGENT)
        P.send_frame(agent, {"t": "agent", "host": "h", "pid": 7, "child": 8})
        agent.close()
        [lost] = [m for m in _messages(s) if m.msg["t"] == "lost"]
    summary = lost.msg["summary"]
    assert summary.startswith("the local agent process running rank 0 (pid 7 on h)")
    assert "Spark" not in summary and summary.endswith("The kernel's stderr may say why.")


def test_agent_told_to_stop_then_vanishing_is_stopped_not_lost(server):
    """Spark's cancel may kill the Python worker before its agent reports: that is part of stopping."""
    agent = connect(server.address, server.secret, 0, P.ROLE_AGENT)
    assert _until(lambda: server.connected("agent") == {0})
    assert server.send(0, "agent", {"t": "stop", "reason": "interrupted"})
    agent.close()
    gone = [m for m in _messages(server) if m.role == "backend"]
    assert [m.msg["t"] for m in gone] == ["stopped"] and gone[0].rank == 0
    state = RunState(4)
    state.apply(0, "backend", gone[0].msg, gone[0].at)
    assert state.ranks[0].state == "stopped" and not state.failures


def test_stop_all_reaches_agents_that_connect_later(server):
    """An agent still connecting when the run stops is told to stop as soon as it is in."""
    early = connect(server.address, server.secret, 0, P.ROLE_AGENT)
    assert _until(lambda: server.connected("agent") == {0})
    assert server.stop_all("timeout") == {0}
    assert P.recv_frame(early, 1 << 16) == {"t": "stop", "reason": "timeout"}
    late = connect(server.address, server.secret, 1, P.ROLE_AGENT)
    late.settimeout(5)
    assert P.recv_frame(late, 1 << 16) == {"t": "stop", "reason": "timeout"}
    late.close()  # killed by Spark's cancel before reporting: stopped, not lost
    early.close()
    gone = sorted((m.rank, m.msg["t"]) for m in _messages(server) if m.role == "backend")
    assert gone == [(0, "stopped"), (1, "stopped")]


def test_agent_reporting_exit_is_not_lost_nor_on_close(server):
    agent = connect(server.address, server.secret, 1, P.ROLE_AGENT)
    P.send_frame(agent, {"t": "exit", "code": 0, "signal": None, "stopped": False, "at": time.time()})
    agent.close()
    assert not [m for m in _messages(server) if m.msg["t"] == "lost"]
    other = connect(server.address, server.secret, 3, P.ROLE_AGENT)
    assert _until(lambda: server.connected("agent") == {3})
    server.close()
    assert not [m for m in _messages(server) if m.msg["t"] == "lost"]
    other.close()


def test_frames_are_plain_pickle_after_auth_only(server):
    """Nothing sent before the handshake is ever unpickled (a pickle bomb there is just refused)."""

    class Boom:
        def __reduce__(self):
            return (exec, ("import builtins; builtins._jtd_pwned = True",))

    raw = socket.create_connection(server.address, timeout=5)
    P.recv_exact(raw, GREETING)
    bomb = pickle.dumps(Boom())
    try:
        raw.sendall(struct.pack(">I", len(bomb)) + bomb)
        raw.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # refused before we finished sending
    _read_until_closed(raw)
    raw.close()
    assert _until(lambda: server.refused == 1)
    import builtins

    assert not getattr(builtins, "_jtd_pwned", False)
