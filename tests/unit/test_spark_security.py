"""The rule for runs on a session with ``spark.ssl.enabled=true`` (``launchers/session/tls_consent.py``): refused unless
``pytorch.spark.distributor.ignoreSsl=true``, as pyspark's TorchDistributor does, with the truth about what is and
is not encrypted; and both launchers apply it before anything is submitted (their sessions faked: the rule reads
only the session's conf). A real session's conf: ranks/test_torch_distributor.py."""
from __future__ import annotations

import time

import pytest

from jupyter_torchdist.channel.tls import TLS_CONF_KEY
from jupyter_torchdist.core.errors import LaunchError
from jupyter_torchdist.launchers import connect
from jupyter_torchdist.launchers import spark as spark_mod
from jupyter_torchdist.launchers.session.tls_consent import (IGNORE_SSL_KEY, SSL_KEY, require_ssl_consent, session_conf,
                                                        ssl_verdict)
from jupyter_torchdist.core.options import RunOptions


SSL_ON = {SSL_KEY: "true"}


# -- the rule ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("conf", [{}, {SSL_KEY: "false"}, {SSL_KEY: "FALSE", IGNORE_SSL_KEY: "true"},
                                  {IGNORE_SSL_KEY: "false"}])
def test_without_spark_ssl_there_is_nothing_to_say(conf):
    verdict = ssl_verdict(conf.get, channel_tls=False)
    assert verdict.refusal is None and verdict.warning is None


@pytest.mark.parametrize("switch", [None, "false", "False"])
def test_spark_ssl_without_the_switch_is_refused_saying_what_is_not_encrypted_and_what_to_set(switch):
    conf = dict(SSL_ON, **({IGNORE_SSL_KEY: switch} if switch else {}))
    verdict = ssl_verdict(conf.get, channel_tls=False)
    assert verdict.warning is None
    text = verdict.refusal or ""
    assert "spark.ssl.enabled=true" in text and "encryption" in text  # pyspark's tests match "encryption"
    assert "torch.distributed" in text and "gloo or NCCL" in text and "not encrypted" in text
    assert f"{IGNORE_SSL_KEY}=true" in text and "spark.conf.set" in text
    assert f"{TLS_CONF_KEY}=true" in text  # our channel is not encrypted either: how to encrypt it


def test_the_message_says_when_our_channel_is_encrypted():
    text = ssl_verdict(SSL_ON.get, channel_tls=True).refusal or ""
    assert "is encrypted (TLS is on)" in text and TLS_CONF_KEY not in text
    assert "traffic between the ranks is not encrypted" in text  # what TLS on the channel does not cover


@pytest.mark.parametrize("switch", ["true", " TRUE ", "True"])
def test_the_switch_lets_the_run_go_with_a_warning(switch):
    verdict = ssl_verdict(dict(SSL_ON, **{IGNORE_SSL_KEY: switch}).get, channel_tls=False)
    assert verdict.refusal is None
    text = verdict.warning or ""
    assert "running anyway" in text and "traffic between the ranks is not encrypted" in text
    assert TLS_CONF_KEY in text


def test_a_switch_that_is_not_true_or_false_is_named():
    text = ssl_verdict(dict(SSL_ON, **{IGNORE_SSL_KEY: "yes"}).get, channel_tls=False).refusal or ""
    assert "it is 'yes'" in text and "only 'true'" in text


def test_another_switch_name_is_honoured():
    """pyspark's constructor takes the switch's name (``_ssl_conf``); so does the rule."""
    conf = dict(SSL_ON, **{"my.ignoreSsl": "true"})
    assert ssl_verdict(conf.get, False).refusal is not None  # the default name is not set
    verdict = ssl_verdict(conf.get, False, ignore_key="my.ignoreSsl")
    assert verdict.refusal is None and "my.ignoreSsl=true" in (verdict.warning or "")


def test_require_raises_a_runtime_error_and_returns_the_warning():
    with pytest.raises(RuntimeError, match="encryption") as info:
        require_ssl_consent(SSL_ON.get, False)
    assert isinstance(info.value, LaunchError)
    assert require_ssl_consent({}.get, False) is None
    assert "running anyway" in (require_ssl_consent(dict(SSL_ON, **{IGNORE_SSL_KEY: "true"}).get, True) or "")


class FakeConf:
    """``spark.conf`` (RuntimeConfig) of a classic or Connect session: ``get(key, default)``."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class BrokenConf:
    def get(self, key: str, default: str | None = None) -> str | None:
        raise RuntimeError("the server will not say")


def test_session_conf_reads_spark_conf_and_says_none_when_the_session_cannot():
    class S:
        conf = FakeConf({SSL_KEY: "true"})

    class Broken:
        conf = BrokenConf()

    assert session_conf(S())(SSL_KEY) == "true" and session_conf(S())("other") is None
    assert session_conf(Broken())(SSL_KEY) is None
    assert session_conf(object())(SSL_KEY) is None  # no conf at all (a fake without one): nothing to check


# -- the launchers apply it (%%distribute, run, TorchDistributor) ---------------------------------------------------
class _Context:
    def __init__(self, master: str, conf: dict[str, str]) -> None:
        self.master, self.defaultParallelism = master, 2
        self._conf = FakeConf(conf)

    def getConf(self):
        return self

    def getAll(self):
        return list(self._conf.values.items())


class _ClassicSession:
    """A classic session on a cluster, faked: its SparkContext's conf and its runtime conf (``spark.conf``)."""

    def __init__(self, master: str, runtime: dict[str, str]) -> None:
        self.sparkContext = _Context(master, {"spark.driver.host": "10.0.0.2"})
        self.conf = FakeConf(runtime)


def _spark_prepare(monkeypatch, session, **options):
    monkeypatch.setattr(spark_mod, "get_session", lambda: (session, False))
    return spark_mod.SparkLauncher().prepare(RunOptions(**options))


def test_the_spark_launcher_refuses_before_waiting_for_slots(monkeypatch):
    """Refused at once even when the cluster is short of slots and a wait would follow."""
    session = _ClassicSession("spark://10.0.0.1:7077", SSL_ON)
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match="encryption") as info:
        _spark_prepare(monkeypatch, session, n=5, wait=30)
    assert time.monotonic() - t0 < 5 and IGNORE_SSL_KEY in str(info.value)


def test_the_spark_launcher_runs_with_the_switch_and_shows_the_warning(monkeypatch):
    session = _ClassicSession("spark://10.0.0.1:7077", dict(SSL_ON, **{IGNORE_SSL_KEY: "true"}))
    info = _spark_prepare(monkeypatch, session, n=2)
    assert len(info.warnings) == 1 and "traffic between the ranks is not encrypted" in info.warnings[0]


def test_the_spark_launcher_applies_the_rule_on_a_local_master_too(monkeypatch):
    """As pyspark: every run on Spark (local_mode=False) is checked, whatever the master."""
    with pytest.raises(LaunchError, match="encryption"):
        _spark_prepare(monkeypatch, _ClassicSession("local[4]", SSL_ON), n=2)
    assert _spark_prepare(monkeypatch, _ClassicSession("local[4]", {}), n=2).warnings == ()


def test_the_local_launcher_never_checks(monkeypatch):
    """--local and local_mode=True: the ranks talk over loopback on this machine, as pyspark's local mode."""
    from jupyter_torchdist.launchers.local import LocalLauncher

    monkeypatch.setattr(spark_mod, "get_session", lambda: pytest.fail("a --local run looked at Spark"))
    assert LocalLauncher().prepare(RunOptions(n=2, local=True)).label == "local"


class _ConnectSession:
    def __init__(self, runtime: dict[str, str]) -> None:
        self.version = "4.3.0"
        self.conf = FakeConf(dict(runtime, **{"spark.master": "spark://10.0.0.1:7077"}))


def test_the_connect_launcher_applies_the_same_rule(monkeypatch):
    monkeypatch.setattr(connect, "connect_session", lambda: session)
    monkeypatch.delenv(connect.CHANNEL_HOST_ENV, raising=False)
    monkeypatch.setenv(connect.CHANNEL_HOST_ENV, "10.0.0.9")  # no address guessing in a unit test
    session = _ConnectSession(SSL_ON)
    with pytest.raises(LaunchError, match="encryption"):
        connect.ConnectLauncher().prepare(RunOptions(n=2))
    session = _ConnectSession(dict(SSL_ON, **{IGNORE_SSL_KEY: "true"}))
    info = connect.ConnectLauncher().prepare(RunOptions(n=2))
    assert any("traffic between the ranks is not encrypted" in w for w in info.warnings)
