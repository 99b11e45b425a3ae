"""TLS on the channel with a pinned per-run certificate (both certificate makers), and the TLS settings and
plaintext warning."""
from __future__ import annotations

import pickle
import socket
import ssl
import threading
import time

import pytest

from jupyter_torchdist.channel import protocol as P
from jupyter_torchdist.channel import server as channel_mod
from jupyter_torchdist.channel import tls
from jupyter_torchdist.channel.handshake import connect
from jupyter_torchdist.channel.server import ChannelServer

from ..support.channel import Recorder, refused


# -- TLS at the channel ------------------------------------------------------------------------------
@pytest.fixture(params=["cryptography", "openssl"])
def identity(request):
    if request.param == "cryptography":
        pytest.importorskip("cryptography")
    elif not __import__("shutil").which("openssl"):
        pytest.skip("no openssl command")
    return tls.make_identity("127.0.0.1", backend=request.param)


def test_tls_round_trip_both_ways_at_once_and_nothing_in_clear(identity):
    """Reader thread and writer thread on one TLS connection (the kernel's pattern), under a recorder."""
    server = ChannelServer(1, tls=identity, max_frame=1 << 22)
    rec = Recorder(server.address)
    try:
        client = connect(rec.address, server.secret, 0, P.ROLE_RANK, tls=server.tls_pin)
        n = 300

        def flood_server() -> None:
            for i in range(n):
                P.send_frame(client, {"t": "log", "text": f"very-secret-line {i} " + "x" * (i * 37 % 5000)})

        sender = threading.Thread(target=flood_server)
        sender.start()
        for i in range(n):
            assert server.send(0, "rank", {"t": "down", "i": i, "pad": "y" * (i * 53 % 7000)})
        got_down = [P.recv_frame(client, 1 << 22)["i"] for _ in range(n)]
        sender.join(30)
        texts = []
        while len(texts) < n:
            ev = server.inbox.get(timeout=10)
            if ev.msg["t"] == "log":
                texts.append(ev.msg["text"])
        assert got_down == list(range(n))
        assert [t.split()[1] for t in texts] == [str(i) for i in range(n)]
        client.close()
        time.sleep(0.1)
    finally:
        rec.close()
        server.close()
    wire = bytes(rec.sent[0]) + bytes(rec.received[0])
    assert b"very-secret-line" not in wire and P.MAGIC not in wire and b"down" not in wire


def test_without_tls_the_same_wire_is_readable():
    """The recorder above would see plaintext if TLS were off (so its assertions mean something)."""
    server = ChannelServer(1)
    rec = Recorder(server.address)
    client = connect(rec.address, server.secret, 0, P.ROLE_RANK)
    P.send_frame(client, {"t": "log", "text": "very-secret-line"})
    server.inbox.get(timeout=5)
    server.inbox.get(timeout=5)
    client.close()
    rec.close()
    server.close()
    assert b"very-secret-line" in bytes(rec.sent[0]) and P.MAGIC in bytes(rec.received[0])


def test_rank_refuses_a_server_with_another_certificate(identity):
    impostor = ChannelServer(1, tls=tls.make_identity("127.0.0.1"))  # knows the secret, wrong certificate
    real_pin = identity.pin()
    try:
        with pytest.raises(ssl.SSLCertVerificationError):
            connect(impostor.address, impostor.secret, 0, P.ROLE_RANK, tls=real_pin, timeout=5)
        assert refused(impostor, 0, 1) and not impostor.connected("rank")
        # the right certificate text but a different fingerprint: the pin check itself refuses
        forged = tls.TLSPin(impostor.tls_pin.cert_pem, "0" * 64)
        with pytest.raises(ssl.SSLCertVerificationError, match="pinned"):
            connect(impostor.address, impostor.secret, 0, P.ROLE_RANK, tls=forged, timeout=5)
    finally:
        impostor.close()


@pytest.mark.slow  # seconds: waits out the handshake timeout
def test_plain_client_cannot_talk_to_a_tls_channel(identity, monkeypatch):
    monkeypatch.setattr(channel_mod, "HANDSHAKE_TIMEOUT_S", 2.0)
    with ChannelServer(1, tls=identity) as s:
        raw = socket.create_connection(s.address, timeout=5)
        raw.sendall(b"R" + b"\0" * 40)  # not a TLS ClientHello
        data = raw.recv(100)
        assert P.MAGIC not in data
        raw.close()
        with pytest.raises((P.ProtocolError, OSError)):
            connect(s.address, s.secret, 0, P.ROLE_RANK, timeout=5)  # no TLS: the greeting never comes
        assert refused(s, 0, 2)
        ok = connect(s.address, s.secret, 0, P.ROLE_RANK, tls=s.tls_pin)
        ok.close()


def test_pin_travels_without_the_private_key(identity):
    pin = identity.pin()
    blob = pickle.dumps(pin)
    assert b"PRIVATE KEY" not in blob and "PRIVATE KEY" in identity.key_pem
    assert "PRIVATE KEY" not in repr(identity)
    assert pin.sha256 == __import__("hashlib").sha256(ssl.PEM_cert_to_DER_cert(pin.cert_pem)).hexdigest()
    assert pickle.loads(blob) == pin


def test_each_run_gets_its_own_certificate():
    a, b = ChannelServer(1, tls=True), ChannelServer(1, tls=True)
    try:
        assert a.tls_pin.sha256 != b.tls_pin.sha256
        with pytest.raises(ssl.SSLCertVerificationError):  # run a's ranks cannot be fooled by run b's kernel
            connect(b.address, b.secret, 0, P.ROLE_RANK, tls=a.tls_pin, timeout=5)
    finally:
        a.close()
        b.close()


def test_no_certificate_maker_fails_with_what_to_install(monkeypatch):
    def no_cryptography(host):
        raise ImportError("cryptography")

    monkeypatch.setattr(tls, "_identity_cryptography", no_cryptography)
    monkeypatch.setattr(tls.shutil, "which", lambda name: None)
    with pytest.raises(tls.TLSError) as info:
        tls.make_identity("127.0.0.1")
    assert "pip install cryptography" in str(info.value) and tls.TLS_CONF_KEY in str(info.value)
    with pytest.raises(tls.TLSError):
        ChannelServer(1, tls=True)


# -- TLS settings and the plaintext warning -----------------------------------------------------------
def _conf(values: dict[str, str]):
    return values.get


def test_tls_setting_from_spark_conf_or_environment(monkeypatch):
    monkeypatch.delenv(tls.TLS_ENV, raising=False)
    assert tls.tls_requested(_conf({})) is False
    assert tls.tls_requested(_conf({tls.TLS_CONF_KEY: "true"})) is True
    assert tls.tls_requested(_conf({tls.TLS_CONF_KEY: "False"})) is False
    monkeypatch.setenv(tls.TLS_ENV, "1")
    assert tls.tls_requested(_conf({tls.TLS_CONF_KEY: "false"})) is True  # the environment wins
    monkeypatch.setenv(tls.TLS_ENV, "0")
    assert tls.tls_requested(_conf({tls.TLS_CONF_KEY: "true"})) is False
    monkeypatch.setenv(tls.TLS_ENV, "maybe")
    with pytest.raises(tls.TLSError, match=tls.TLS_ENV):
        tls.tls_requested(_conf({}))
    monkeypatch.delenv(tls.TLS_ENV)
    with pytest.raises(tls.TLSError, match=tls.TLS_CONF_KEY):
        tls.tls_requested(_conf({tls.TLS_CONF_KEY: "enabled"}))


@pytest.mark.parametrize("conf, tls_on, expect", [
    ({"spark.network.crypto.enabled": "true"}, False, "spark.network.crypto.enabled=true"),
    ({"spark.ssl.enabled": "TRUE"}, False, "spark.ssl.enabled=true"),
    ({"spark.network.crypto.enabled": "true"}, True, None),
    ({"spark.network.crypto.enabled": "false"}, False, None),
    ({}, False, None),
])
def test_plaintext_warning_only_when_spark_encrypts_and_we_do_not(conf, tls_on, expect):
    warning = tls.plaintext_warning(_conf(conf), tls_on)
    if expect is None:
        assert warning is None
    else:
        assert expect in warning and tls.TLS_CONF_KEY in warning and tls.TLS_ENV in warning
