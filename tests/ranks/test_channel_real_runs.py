"""The channel's security in real runs on the embedded Spark session: loopback binding and attacks during a run,
TLS with nothing in clear on the wire, and the warning when Spark encrypts but the channel does not."""
from __future__ import annotations

import os
import socket
import threading

import cloudpickle
import pytest

import jupyter_torchdist as jt
from jupyter_torchdist.channel import protocol as P
from jupyter_torchdist.channel import tls
from jupyter_torchdist.channel.handshake import connect
from jupyter_torchdist.channel.server import ChannelServer
from jupyter_torchdist.kernel.runs import rankset as supervisor
from jupyter_torchdist.launchers.session import embedded as spark_launcher

from ..support import fault_helpers as fh
from ..support.channel import GREETING, Recorder, refused

cloudpickle.register_pickle_by_value(fh)  # the ranks cannot import the tests package


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
    assert refused(server, before, attacks)

    (tmp_path / "go").write_text("")
    runner.join(60)
    r = result["r"]
    assert r.value == 3  # (0+1) + (1+1): the run was undisturbed
    assert [x.state for x in r.state.ranks] == ["done", "done"] and not r.state.failures
    assert server.refused == before + attacks


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
