"""When the embedded Spark session starts: when something needs it, never just because the extension loaded.

``%load_ext`` starts only the local process server (a Python that imported torch). The embedded session (a JVM, its
services and Python workers: several hundred MB and 10 s or more) starts in the background the first time a run
could use it (a cell without ``--local``: that cell and the next run as local processes meanwhile, see
``warming``; the JVM starts once that cell's run has ended, ``FIRST_RUN_S`` at most), or at once when the notebook
asks for a session (``SparkSession.builder.getOrCreate()``, ``jupyter_torchdist.spark_session()``,
``TorchDistributor(local_mode=False)``). A notebook that only ever runs ``--local`` never starts a JVM.

Without Java (nothing at ``$JAVA_HOME/bin/java``, no ``java`` on PATH) nothing here starts a JVM: runs go to local
processes (the local launcher stands in: ``launchers.stand_in``), and the first one says why.
"""
from __future__ import annotations

import os
import shutil
import threading
import time
from typing import Any, Final

__all__ = ["java_available", "enable", "disable", "wanted", "allowed", "ZYGOTE_FIRST_S"]

ZYGOTE_FIRST_S: Final = 10.0  # the JVM waits this long at most for the zygote: on two cores they would slow each other
FIRST_RUN_S: Final = 10.0     # and this long at most for the run that asked for it (on local processes meanwhile)

_lock = threading.Lock()
_allowed = False
_started = False   # the warm-up ran (or runs) since the extension loaded
_zygote: Any = None


def java_available() -> bool:
    """Whether a Java runtime is there for Spark to start (what pyspark's launcher looks for)."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return True
    return shutil.which("java") is not None


def enable(zygote: Any) -> None:
    """``%load_ext`` with the warm-up on: the embedded session may start when something needs it."""
    global _allowed, _zygote
    with _lock:
        _allowed, _zygote = True, zygote


def disable() -> None:
    global _allowed, _zygote, _started
    with _lock:
        _allowed, _zygote, _started = False, None, False



def allowed() -> bool:
    return _allowed


def wanted() -> bool:
    """A run or a session may use the embedded session: start warming it up in the background, once. True when
    a warm-up is (or was) under way; False without Java or when the extension's warm-up is off."""
    from .embedded import embedded_session, warm_up_async, warm_workers

    global _started
    with _lock:
        if not _allowed or not java_available():
            return False
        if _started:
            return True
        _started, zygote = True, _zygote

    if embedded_session() is not None:  # asked for directly and up: only its Python workers warm up
        threading.Thread(target=warm_workers, name="jtd-warm-workers", daemon=True).start()
        return True

    def first() -> None:
        if zygote is not None:
            zygote.ready.wait(ZYGOTE_FIRST_S)
            _after_the_first_run(zygote)

    warm_up_async(before=first, after=lambda: _idle_zygote_goes(zygote))
    return True


def _after_the_first_run(zygote: Any) -> None:
    """The JVM starts once the run that asked for it has ended (``FIRST_RUN_S`` at most): that run goes to local
    processes meanwhile, and on two cores a JVM starting beside it takes half its speed. The run registers with the
    process server a moment after it asked; a quarter second without one means no run waits."""
    began = time.monotonic()
    while not zygote.busy() and time.monotonic() - began < 0.25:
        time.sleep(0.01)
    while zygote.busy() and time.monotonic() - began < FIRST_RUN_S:
        time.sleep(0.02)


def own_session_built() -> None:
    """The notebook built a session of its own: runs go to it, so the process server ``%load_ext`` started for the
    first cells goes, unless a run uses it or asked for it (``--local``)."""
    with _lock:
        zygote = _zygote
    if zygote is not None:
        _idle_zygote_goes(zygote)


def _idle_zygote_goes(zygote: Any) -> None:
    """Once the session is warm, the zygote ``%load_ext`` started goes unless a run uses it or asked for it."""
    from ..local_server import stop_zygote, zygote_if_running

    running = zygote_if_running()
    if running is not None and running is zygote and not running.busy() and not running.asked:
        stop_zygote()
