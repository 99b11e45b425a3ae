"""The live channel fuzzed with hypothesis: garbage before and after the handshake, and the server stays healthy."""
from __future__ import annotations

import socket
import threading

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_torchdist.core import contract as C
from jupyter_torchdist.channel import protocol as P
from jupyter_torchdist.channel.handshake import connect
from jupyter_torchdist.channel.server import ChannelServer

from ..support.channel import GREETING, messages, read_until_closed, until

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
    assert not read_until_closed(raw).startswith(b"OK")
    raw.close()
    assert until(lambda: server.refused == before + 1)
    assert not server.connected("rank") and not server.connected("agent")


_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
                       | st.binary(max_size=20), lambda c: st.lists(c, max_size=3)
                       | st.dictionaries(st.text(max_size=5), c, max_size=3), max_leaves=8)


_msg = st.fixed_dictionaries({"t": st.sampled_from(["log", "progress", "state", "result", "exit", "zz"])},
                             optional={k: _values for k in ("at", "step", "text", "metrics", "value", "host", "x")})


@_FUZZ
@given(valid=st.lists(_msg, max_size=4), garbage=st.binary(max_size=300), as_list=st.booleans())
def test_fuzz_after_the_handshake_keeps_the_server_healthy(valid, garbage, as_list):
    server = ChannelServer(4, max_frame=1 << 16)  # a run's rank connects once: each example is a run of its own
    try:
        _assert_harmless(server, valid, garbage, as_list)
    finally:
        server.close()


def _assert_harmless(server: ChannelServer, valid: list, garbage: bytes, as_list: bool) -> None:
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
    read_until_closed(sock)  # the server ends the connection: at the garbage, or at our EOF
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
    s = ChannelServer(31, max_frame=1 << 12)
    try:
        rng = __import__("random").Random(7)
        for i in range(60):
            raw = socket.create_connection(s.address, timeout=10)
            if i % 2:
                P.recv_exact(raw, GREETING)
                raw.sendall(rng.randbytes(rng.randrange(0, 100)))
            raw.close()
        for i in range(30):  # a rank connects once per run: a new rank each time
            sock = connect(s.address, s.secret, i, P.ROLE_RANK)
            sock.sendall(rng.randbytes(rng.randrange(1, 300)))
            sock.close()
            assert until(lambda: not s.connected("rank"))
        assert until(lambda: threading.active_count() == baseline + 2), threading.enumerate()  # acceptor, reader
        ok = connect(s.address, s.secret, 30, P.ROLE_AGENT)
        P.send_frame(ok, {"t": "agent", "host": "h", "pid": 1})
        assert any(m.msg["t"] == "agent" and m.rank == 30 for m in messages(s))
        ok.close()
    finally:
        s.close()
    assert until(lambda: threading.active_count() == baseline)
