"""The embedded session's JVM: started quietly for it, with its settings its own, and stopped with its processes.

pyspark starts one JVM per Python process and keeps it for every SparkContext after. The embedded session's settings
reach that JVM twice: as spark-submit's ``--conf`` (system properties every later ``SparkConf`` reads) and as the
environment the JVM is started with. Here they stay the embedded session's: the JVM is started with
``SPARK_LOCAL_IP`` in its own environment only (never the kernel's), and forgets the ``--conf`` settings once the
embedded context has copied them. When the notebook asks for a session of its own (``give_way``), the JVM is stopped
with the embedded session, so that pyspark starts the notebook's in a JVM of its own, as without the extension: its
driver memory, Java options and jars apply.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["quiet_gateway", "forget_launch_settings", "jvm_is_ours", "stop_jvm", "session_log", "log_tail"]

_env_lock = threading.Lock()
_our_gateway: Any = None  # the py4j gateway of the JVM started for the embedded session
_log_path: str | None = None


def session_log() -> str | None:
    """The file holding the embedded session's JVM output (start-up, executor and Python worker logs)."""
    return _log_path


def quiet_gateway(conf: dict[str, str]) -> None:
    """Start the JVM with its output in a log file (only when no JVM runs yet in this process)."""
    global _log_path, _our_gateway
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    fd, path = tempfile.mkstemp(prefix="jupyter-torchdist-spark-", suffix=".log")
    with os.fdopen(fd, "wb") as log, _launch_env({"SPARK_LOCAL_IP": "127.0.0.1"}):
        spark_conf = SparkConf().setAll(list(conf.items()))
        gateway = launch_gateway(spark_conf, popen_kwargs={"stdout": log,  # type: ignore[no-untyped-call]
                                                           "stderr": subprocess.STDOUT})
    _log_path, _our_gateway = path, gateway
    SparkContext._ensure_initialized(gateway=gateway)


@contextlib.contextmanager
def _launch_env(values: dict[str, str]) -> Iterator[None]:
    """``values`` in the environment the JVM is started with, and only there: pyspark's launcher copies
    ``os.environ`` when it starts the JVM, so they are set for that moment and put back as they were."""
    with _env_lock:
        before = {key: os.environ.get(key) for key in values}
        for key, value in values.items():
            os.environ.setdefault(key, value)
        try:
            yield
        finally:
            for key, was in before.items():
                if was is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = was


def forget_launch_settings(session: Any, conf: dict[str, str]) -> None:
    """The JVM keeps the settings it was started with as system properties, which every later ``SparkConf`` reads:
    once the embedded context has copied them, the JVM forgets them, so a session built later in this JVM gets only
    its own settings (and Spark's defaults)."""
    try:
        system = session.sparkContext._jvm.java.lang.System
        for key in conf:
            system.clearProperty(key)
    except Exception:
        pass


def jvm_is_ours() -> bool:
    """Whether the running JVM was started for the embedded session (not by a session the notebook built first)."""
    from pyspark import SparkContext

    return _our_gateway is not None and SparkContext._gateway is _our_gateway


def log_tail(lines: int = 40) -> str:
    if _log_path is None:
        return ""
    try:
        with open(_log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def stop_jvm(wait_s: float = 15.0) -> None:
    global _our_gateway
    from pyspark import SparkContext

    gateway, _our_gateway = _our_gateway, None
    proc = getattr(gateway, "proc", None)
    SparkContext._gateway = None
    SparkContext._jvm = None
    try:
        gateway.shutdown()
    except Exception:
        pass
    if proc is None:
        return
    try:
        proc.stdin.close()  # the gateway server exits when its stdin closes, its Python daemon with it
        proc.wait(wait_s)
    except Exception:
        proc.kill()
        proc.wait()
