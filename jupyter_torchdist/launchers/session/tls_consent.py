"""Spark's TLS and the ranks' own traffic: a run on a session with ``spark.ssl.enabled=true`` needs consent.

Why: Spark's TLS covers Spark's links, not the ranks' torch.distributed traffic (gloo or NCCL: gradients,
parameters, whatever tensors the ranks share), which goes between executors unencrypted. A session that asks for
TLS says that its links can be read, so a run there is refused unless the session also sets
``pytorch.spark.distributor.ignoreSsl=true``: pyspark's TorchDistributor has the same rule and the same switch, so
a notebook moving between the two behaves alike. With the switch the run goes ahead with a warning.

The rule is pyspark's: it reads the session's conf (``spark.conf``: what the session was built with and what
``spark.conf.set`` changed since), for every run on Spark whatever the master, and never for runs on this machine
alone (``--local``, ``local_mode=True``). What we add is the truth about our own channel between the ranks and the
kernel (values, logs, tracebacks): encrypted when its TLS is on (``channel/tls.py``), and the message says which.

The rule is a pure function of the conf (``ssl_verdict``); ``require_ssl_consent`` is what a launcher calls.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from ...channel.tls import TLS_CONF_KEY, TLS_ENV
from ...core.errors import LaunchError

__all__ = ["SSL_KEY", "IGNORE_SSL_KEY", "SslVerdict", "ssl_verdict", "require_ssl_consent", "session_conf"]

SSL_KEY: Final = "spark.ssl.enabled"
IGNORE_SSL_KEY: Final = "pytorch.spark.distributor.ignoreSsl"  # pyspark's name, so one setting serves both
ConfGet = Callable[[str], "str | None"]


@dataclass(frozen=True)
class SslVerdict:
    """What the rule says about one run: at most one of the two is set."""

    refusal: str | None = None  # the run must not start; the message says why and what to set
    warning: str | None = None  # the run may start; the message says what goes unencrypted


def _is_true(value: str | None) -> bool:
    return str(value or "").strip().lower() == "true"


def _channel(tls_on: bool) -> str:
    """Our own part, said truthfully: the channel between the ranks and the kernel."""
    if tls_on:
        return "The channel between the ranks and this kernel (values, logs, tracebacks) is encrypted (TLS is on)."
    return (f"Neither is the channel between the ranks and this kernel (values, logs, tracebacks): set "
            f"{TLS_CONF_KEY}=true on the session (or {TLS_ENV}=1 in the kernel's environment) to encrypt it.")


def ssl_verdict(conf_get: ConfGet, channel_tls: bool, ignore_key: str = IGNORE_SSL_KEY) -> SslVerdict:
    """The rule for a run on Spark: refused when ``spark.ssl.enabled`` is true and ``ignore_key`` is not; let go with
    a warning when both are; nothing to say otherwise. ``channel_tls``: whether our channel's TLS is on."""
    if not _is_true(conf_get(SSL_KEY)):
        return SslVerdict()
    unencrypted = ("the ranks exchange gradients, parameters and any tensors they share over torch.distributed "
                   "(gloo or NCCL), which Spark's encryption does not cover: that traffic between the ranks is not "
                   "encrypted.")
    if _is_true(conf_get(ignore_key)):
        return SslVerdict(warning=f"{SSL_KEY}=true and {ignore_key}=true: running anyway, but {unencrypted} "
                                  f"{_channel(channel_tls)}")
    given = conf_get(ignore_key)
    odd = f" (it is {given!r}: only 'true' lets the run go)" if given and given.strip().lower() != "false" else ""
    return SslVerdict(refusal=(
        f"this SparkSession has {SSL_KEY}=true, but {unencrypted} {_channel(channel_tls)} To run anyway, set "
        f"{ignore_key}=true on the session{odd}: spark.conf.set({ignore_key!r}, 'true'), or .config(...) when "
        "building it (the same switch as pyspark's TorchDistributor). Runs on this machine alone (--local, "
        "local_mode=True) are not refused."))


def require_ssl_consent(conf_get: ConfGet, channel_tls: bool, ignore_key: str | None = None) -> str | None:
    """Raise LaunchError when the rule refuses the run; else the warning to show with it (None: nothing to say).
    ``ignore_key``: the switch that lets it go (None: TorchDistributor's; DeepSpeed's class has its own)."""
    verdict = ssl_verdict(conf_get, channel_tls, ignore_key or IGNORE_SSL_KEY)
    if verdict.refusal is not None:
        raise LaunchError(verdict.refusal)
    return verdict.warning


def session_conf(spark: Any) -> ConfGet:
    """A reader of ``spark``'s conf as pyspark's TorchDistributor reads it (``spark.conf.get``: the settings the
    session was built with, and ``spark.conf.set`` since), for a classic or a Connect session; None when unset
    or when the session will not say."""
    def get(key: str) -> str | None:
        try:
            value = spark.conf.get(key, None)
        except Exception:
            return None
        return None if value is None else str(value)

    return get
