"""The channel's security: per-run secret (no secret, wrong secret, replayed handshake), loopback
binding during a real Spark run, and TLS with a pinned per-run certificate."""
from __future__ import annotations

import os
import pickle
import socket
import ssl
import threading
import time

import cloudpickle
import pytest

import jupyter_torchdist as jt
from jupyter_torchdist.channel import server as channel_mod
from jupyter_torchdist.channel import protocol as P
from jupyter_torchdist.channel import tls
from jupyter_torchdist.kernel import rankset as supervisor
from jupyter_torchdist.channel.server import ChannelServer
from jupyter_torchdist.launchers import spark_session as spark_launcher
from jupyter_torchdist.channel.client import connect

from . import fault_helpers as fh

cloudpickle.register_pickle_by_value(fh)  # the ranks cannot import the tests package

GREETING = len(P.MAGIC) + P.NONCE_LEN


class Recorder:
    """A TCP relay in front of a server that records what each client sent (an eavesdropper's view)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.sent: list[bytearray] = []   # per connection: client -> server bytes
        self.received: list[bytearray] = []  # per connection: server -> client bytes
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = self._listener.getsockname()[:2]
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        self._start(self._accept)

    def _start(self, fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        self._threads.append(t)
        t.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._socks += [client, upstream]
            up, down = bytearray(), bytearray()
            self.sent.append(up)
            self.received.append(down)
            self._start(self._pump, client, upstream, up)
            self._start(self._pump, upstream, client, down)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, log: bytearray) -> None:
        try:
            while data := src.recv(65536):
                log += data
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        for s in self._socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._threads:
            t.join(5)
        for s in self._socks:
            s.close()


def _refused(server: ChannelServer, before: int, count: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.refused >= before + count:
            return True
        time.sleep(0.02)
    return False


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
            assert _refused(target, before, 1)
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
        assert _refused(s, 0, 2)
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


# -- a real run under attack -----------------------------------------------------------------------
@pytest.fixture
def servers(monkeypatch):
    """Every ChannelServer the supervisor creates, recorded (optionally behind a Recorder)."""
    made: list[ChannelServer] = []
    recorders: list[Recorder] = []
    opts = {"record": False}

    class Capturing(ChannelServer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)
            if opts["record"]:
                rec = Recorder(self.address)
                recorders.append(rec)
                self.address = rec.address  # the ranks connect through the recorder

    monkeypatch.setattr(supervisor, "ChannelServer", Capturing)
    yield made, recorders, opts
    for r in recorders:
        r.close()


@pytest.mark.spark
def test_attacks_during_a_real_run_are_refused_and_do_not_disturb_it(spark, servers, tmp_path):
    made, recorders, opts = servers
    opts["record"] = True
    assert jt.run(fh.quick, n=2) == 1  # the earlier run, recorded on the wire
    earlier_hellos = [bytes(b[:P.HELLO_LEN]) for b in recorders[0].sent if len(b) >= P.HELLO_LEN]
    assert len(earlier_hellos) == 4  # rank and agent of both ranks
    opts["record"] = False

    result: dict = {}
    runner = threading.Thread(target=lambda: result.setdefault("r", jt.run_detailed(fh.wait_for_go, str(tmp_path),
                                                                                       n=2)))
    runner.start()
    fh.wait_for_markers(str(tmp_path), 2)
    server = made[-1]
    before = server.refused
    assert server.bound[0] == "127.0.0.1"
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    port = f"{server.bound[1]:04X}"
    assert any(r[1] == f"0100007F:{port}" and r[3] == "0A" for r in rows)
    assert not any(r[1] == f"00000000:{port}" for r in rows), "the channel listens on every interface"

    attacks = 0
    for hello in earlier_hellos:  # replay the earlier run's handshakes
        raw = socket.create_connection(server.address, timeout=5)
        P.recv_exact(raw, GREETING)
        raw.sendall(hello)
        assert raw.recv(100) == b""
        raw.close()
        attacks += 1
    with pytest.raises(P.ProtocolError):  # a wrong secret, for rank 0
        connect(server.address, P.new_secret(), 0, P.ROLE_RANK, timeout=5)
    attacks += 1
    raw = socket.create_connection(server.address, timeout=5)  # no secret at all
    raw.sendall(os.urandom(5000))
    raw.close()
    attacks += 1
    assert _refused(server, before, attacks)

    (tmp_path / "go").write_text("")
    runner.join(60)
    r = result["r"]
    assert r.value == 3  # (0+1) + (1+1): the run was undisturbed
    assert [x.state for x in r.state.ranks] == ["done", "done"] and not r.state.failures
    assert server.refused == before + attacks


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
        assert _refused(impostor, 0, 1) and not impostor.connected("rank")
        # the right certificate text but a different fingerprint: the pin check itself refuses
        forged = tls.TLSPin(impostor.tls_pin.cert_pem, "0" * 64)
        with pytest.raises(ssl.SSLCertVerificationError, match="pinned"):
            connect(impostor.address, impostor.secret, 0, P.ROLE_RANK, tls=forged, timeout=5)
    finally:
        impostor.close()


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
        assert _refused(s, 0, 2)
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


# -- TLS in a real run ------------------------------------------------------------
@pytest.mark.spark
def test_real_run_over_tls_shows_nothing_on_the_wire(spark, servers, monkeypatch):
    made, recorders, opts = servers
    opts["record"] = True
    monkeypatch.setenv(tls.TLS_ENV, "1")
    assert jt.run(fh.quick, n=2) == 1
    assert made[-1].tls_pin is not None
    rec = recorders[-1]
    assert len(rec.sent) == 4  # rank and agent of both ranks went through the recorder
    wire = b"".join(bytes(b) for b in rec.sent + rec.received)
    for clear in (P.MAGIC, b"hello", b"rendezvous", b"result", b"agent"):
        assert clear not in wire, clear


@pytest.mark.spark
def test_run_warns_when_spark_encrypts_but_the_channel_does_not(spark, monkeypatch, capsys):
    real = spark_launcher._read_conf
    encrypting = lambda sc: {**real(sc), "spark.network.crypto.enabled": "true"}
    monkeypatch.setattr(spark_launcher, "_read_conf", encrypting)  # what a session with Spark's encryption reports
    monkeypatch.setattr(spark_launcher, "_conf_cache", {})  # read afresh (settings are cached per context)
    monkeypatch.delenv(tls.TLS_ENV, raising=False)
    assert jt.run(fh.quick, n=2) == 1
    err = capsys.readouterr().err
    assert "warning" in err and "spark.network.crypto.enabled=true" in err and tls.TLS_CONF_KEY in err
    monkeypatch.setenv(tls.TLS_ENV, "1")
    assert jt.run(fh.quick, n=2) == 1
    assert "spark.network.crypto.enabled" not in capsys.readouterr().err
