"""The live channel's connections: loopback binding, pending handshakes, stalled and trickling peers, lost agents."""
from __future__ import annotations

import socket
import time

import pytest

from jupyter_torchdist.channel import protocol as P
from jupyter_torchdist.channel import server as channel_mod
from jupyter_torchdist.channel.handshake import connect
from jupyter_torchdist.channel.server import ChannelServer
from jupyter_torchdist.kernel.state.run import RunState

from ..support.channel import GREETING, messages, read_until_closed, until


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
        assert read_until_closed(extra, 5) == b""  # shed at once, not after the handshake timeout
        for sock in idle:
            sock.close()
        assert until(lambda: s.refused == 4)
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


@pytest.mark.slow  # seconds: waits out the send timeout
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
        assert until(lambda: not s.connected("agent"))
        sock.close()


# -- a lost agent -----------------------------------------------------------------------------------
def test_agent_vanishing_without_exit_is_reported_lost(server):
    agent = connect(server.address, server.secret, 2, P.ROLE_AGENT)
    P.send_frame(agent, {"t": "agent", "host": "exec-7", "pid": 4242, "child": 4243})
    agent.close()  # what SIGKILL of the Spark Python worker looks like from here
    lost = [m for m in messages(server) if m.msg["t"] == "lost"]
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
        [lost] = [m for m in messages(s) if m.msg["t"] == "lost"]
    summary = lost.msg["summary"]
    assert summary.startswith("the local agent process running rank 0 (pid 7 on h)")
    assert "Spark" not in summary and summary.endswith("The kernel's stderr may say why.")


def test_agent_told_to_stop_then_vanishing_is_stopped_not_lost(server):
    """Spark's cancel may kill the Python worker before its agent reports: that is part of stopping."""
    agent = connect(server.address, server.secret, 0, P.ROLE_AGENT)
    assert until(lambda: server.connected("agent") == {0})
    assert server.send(0, "agent", {"t": "stop", "reason": "interrupted"})
    agent.close()
    gone = [m for m in messages(server) if m.role == "backend"]
    assert [m.msg["t"] for m in gone] == ["stopped"] and gone[0].rank == 0
    state = RunState(4)
    state.apply(0, "backend", gone[0].msg, gone[0].at)
    assert state.ranks[0].state == "stopped" and not state.failures


def test_stop_all_reaches_agents_that_connect_later(server):
    """An agent still connecting when the run stops is told to stop as soon as it is in."""
    early = connect(server.address, server.secret, 0, P.ROLE_AGENT)
    assert until(lambda: server.connected("agent") == {0})
    assert server.stop_all("timeout") == {0}
    assert P.recv_frame(early, 1 << 16) == {"t": "stop", "reason": "timeout"}
    late = connect(server.address, server.secret, 1, P.ROLE_AGENT)
    late.settimeout(5)
    assert P.recv_frame(late, 1 << 16) == {"t": "stop", "reason": "timeout"}
    late.close()  # killed by Spark's cancel before reporting: stopped, not lost
    early.close()
    gone = sorted((m.rank, m.msg["t"]) for m in messages(server) if m.role == "backend")
    assert gone == [(0, "stopped"), (1, "stopped")]


def test_agent_reporting_exit_is_not_lost_nor_on_close(server):
    agent = connect(server.address, server.secret, 1, P.ROLE_AGENT)
    P.send_frame(agent, {"t": "exit", "code": 0, "signal": None, "stopped": False, "at": time.time()})
    agent.close()
    assert not [m for m in messages(server) if m.msg["t"] == "lost"]
    other = connect(server.address, server.secret, 3, P.ROLE_AGENT)
    assert until(lambda: server.connected("agent") == {3})
    server.close()
    assert not [m for m in messages(server) if m.msg["t"] == "lost"]
    other.close()
