"""The live channel with real sockets: who a message is from, and bad frames (too big, not a pickle,
wrongly typed, a pickle before the handshake)."""
from __future__ import annotations

import pickle
import socket
import time
import struct

import pytest

from jupyter_torchdist.channel import protocol as P
from jupyter_torchdist.channel.handshake import connect
from jupyter_torchdist.kernel.state.run import RunState

from ..support.channel import GREETING, messages, read_until_closed, until


# -- identity -------------------------------------------------------------------------------------
def test_messages_are_stamped_with_the_authenticated_rank(server):
    sock = connect(server.address, server.secret, 1, P.ROLE_RANK)
    P.send_frame(sock, [{"t": "result", "rank": 0, "value": None, "repr": "'forged'", "at": 1.0}])
    got = [m for m in messages(server) if m.msg["t"] == "result"]
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
    deadline = time.monotonic() + 5
    while server.connected("rank") and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(P.ProtocolError, match="refused"):  # never again in this run: a rank never runs twice
        connect(server.address, server.secret, 2, P.ROLE_RANK, timeout=5)


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
    assert read_until_closed(bad) == b""
    assert until(lambda: server.connected("rank") == {1})
    P.send_frame(good, {"t": "log", "text": "still here"})
    texts = [m.msg.get("text") for m in messages(server) if m.rank == 1]
    assert "still here" in texts and server.malformed == 1
    good.close()
    bad.close()


def test_unpicklable_frame_is_refused(server):
    sock = connect(server.address, server.secret, 0, P.ROLE_RANK)
    junk = b"\x80\x05not a pickle"
    sock.sendall(struct.pack(">I", len(junk)) + junk)
    assert read_until_closed(sock) == b""
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
    got = [m.msg for m in messages(server) if m.msg["t"] not in ("connected",)]
    assert got == [{"t": "log", "text": "after", "rank": 3}]
    assert server.malformed == 1
    sock.close()



def test_a_connection_speaks_only_for_its_own_role(server):
    """A rank cannot send its agent's, the channel's or the launcher's messages; an agent cannot send a rank's."""
    rank = connect(server.address, server.secret, 1, P.ROLE_RANK)
    agent = connect(server.address, server.secret, 1, P.ROLE_AGENT)
    P.send_frame(rank, [{"t": "connected"}, {"t": "exit", "code": 1, "signal": None, "stopped": False, "at": 1.0},
                        {"t": "lost", "summary": "forged"}, {"t": "log", "stream": "stdout", "text": "ok", "at": 1.0}])
    assert until(lambda: server.malformed == 3)
    P.send_frame(agent, [{"t": "result", "value": None, "repr": "1", "at": 1.0}, {"t": "disconnected"},
                         {"t": "agent", "host": "h", "pid": 1, "child": 2}])
    assert until(lambda: server.malformed == 5)
    got = [(m.role, m.msg["t"]) for m in messages(server)]
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
    read_until_closed(raw)
    raw.close()
    assert until(lambda: server.refused == 1)
    import builtins

    assert not getattr(builtins, "_jtd_pwned", False)
