"""The channel's per-run secret: no secret, a wrong one, a replayed handshake, a listener posing as the kernel."""
from __future__ import annotations

import os
import socket
import threading

import pytest

from jupyter_torchdist.channel import protocol as P
from jupyter_torchdist.channel.handshake import connect
from jupyter_torchdist.channel.server import ChannelServer

from ..support.channel import GREETING, Recorder, refused


# -- the secret, at the channel ----------------------------------------------------------------------
def test_replayed_handshake_from_an_earlier_run_is_refused():
    earlier = ChannelServer(2)
    rec = Recorder(earlier.address)
    sock = connect(rec.address, earlier.secret, 0, P.ROLE_RANK)  # a real rank of the earlier run
    sock.close()
    rec.close()
    hello = bytes(rec.sent[0][:P.HELLO_LEN])
    assert hello[:1] == P.ROLE_RANK and len(hello) == P.HELLO_LEN
    now = ChannelServer(2)
    try:
        for target in (now, earlier):  # another run's secret; the same run but a fresh nonce
            before = target.refused
            raw = socket.create_connection(target.address, timeout=5)
            assert P.recv_exact(raw, GREETING).startswith(P.MAGIC)
            raw.sendall(hello)
            assert raw.recv(100) == b""  # closed without "OK"
            raw.close()
            assert refused(target, before, 1)
            assert not target.connected("rank")  # the slot the replay claimed is still free ...
        ok = connect(now.address, now.secret, 0, P.ROLE_RANK)  # ... for the real rank
        ok.close()
    finally:
        now.close()
        earlier.close()


def test_wrong_or_missing_secret_is_refused():
    with ChannelServer(2) as s:
        with pytest.raises(P.ProtocolError):
            connect(s.address, P.new_secret(), 0, P.ROLE_RANK, timeout=5)
        raw = socket.create_connection(s.address, timeout=5)
        raw.close()  # connects and says nothing
        assert refused(s, 0, 2)
        assert not s.connected("rank")


def test_rank_refuses_a_kernel_without_the_secret():
    """Mutual: a listener that does not know the run's secret cannot pose as the kernel."""
    fake = socket.create_server(("127.0.0.1", 0))

    def impostor() -> None:
        conn, _ = fake.accept()
        conn.sendall(P.MAGIC + os.urandom(P.NONCE_LEN))
        P.recv_exact(conn, P.HELLO_LEN)
        conn.sendall(b"OK" + os.urandom(P.MAC_LEN))
        conn.close()

    t = threading.Thread(target=impostor)
    t.start()
    with pytest.raises(P.ProtocolError, match="refused"):
        connect(fake.getsockname()[:2], P.new_secret(), 0, P.ROLE_RANK, timeout=5)
    t.join(5)
    fake.close()
