"""Launcher backends, one per file, behind the small interface in ``base``; chosen by ``registry``.

The built-in backends are registered here, and nowhere else (the simulated ranks of ``simulated`` are registered by
the tests and benchmarks that use them, never here: a user's kernel cannot pick them). pyspark is imported only by
the Spark backend's modules (``spark*``), when a run chooses it.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Final

from ..core.options import RunOptions
from .base import Capacity, DataPlane, Launcher
from .interrupts import guard_interrupts
from .base import Backend, backend_for, backends, register, unregister

__all__ = ["Launcher", "Capacity", "DataPlane", "Backend", "register", "unregister", "backends", "backend_for",
           "launcher_for", "data_plane", "on_load", "on_unload", "guard_interrupts", "may_use_spark", "stand_in",
           "detach_target", "join_connect", "WARMUP_ENV", "warm_up_on", "start_process_server"]

WARMUP_ENV: Final = "JUPYTER_TORCHDIST_WARMUP"  # "0": %load_ext starts nothing (no process server, no Spark)


def warm_up_on() -> bool:
    return os.environ.get(WARMUP_ENV, "1") != "0"


def _connect(options: RunOptions) -> bool:
    from .session.notebook import connect_session

    return not options.local and connect_session() is not None


def stand_in(options: RunOptions) -> str | None:
    """Why a run that would use the embedded Spark session runs as local processes instead: ``"no-java"`` (no Java
    here for Spark, every time) or ``"warming"`` (the session is still starting); None when it does not (it asked
    for ``--local``, it must be Spark tasks, the notebook has a Connect session, or the embedded session is up).
    The local launcher says which in its label (``local.STAND_IN_LABELS``)."""
    if options.local or options.spark_tasks or _connect(options):
        return None
    from .session.autostart import java_available

    if not java_available():
        return "no-java"
    from .session.embedded import warming  # imports nothing heavy; pyspark only if it is loaded already

    return "warming" if warming() else None


def detach_target(options: RunOptions) -> str | None:
    """Where a detached run (``--detach``) may run without this kernel: None for a runner of its own on this machine
    (``--local``, or the embedded session the runner starts for itself), or the notebook's Spark Connect session's
    address (the runner connects to the same server). A run on the notebook's classic session, whose driver is this
    kernel, is refused (``OptionsError``) before anything starts."""
    if options.local:
        return None
    from .session.notebook import connect_session, own_classic_session

    connect = connect_session()
    if connect is not None:   # pyspark keeps the address parsed as http://...; its own form is sc://...
        parsed = str(connect.client._builder.url.geturl())
        return "sc" + parsed[4:] if parsed.startswith("http") else parsed
    if own_classic_session() is not None:
        from ..core.errors import OptionsError

        raise OptionsError(
            "--detach: the notebook's Spark session runs its driver in this kernel, so a run on it would end with the "
            "kernel. Detach onto a Spark Connect session (SparkSession.builder.remote('sc://HOST:15002')"
            ".getOrCreate(): the server is the driver), or run it on this machine with --local")
    return None


def join_connect(url: str) -> None:
    """A detached run's runner: the Spark Connect session of the notebook that handed it over, active here."""
    from pyspark.sql import SparkSession

    SparkSession.builder.remote(url).getOrCreate()


register("local", "jupyter_torchdist.launchers.local:LocalLauncher",
         lambda options: options.local or stand_in(options) is not None, priority=100)
register("connect", "jupyter_torchdist.launchers.connect:ConnectLauncher", _connect, priority=0)
register("spark", "jupyter_torchdist.launchers.spark:SparkLauncher", lambda options: True, priority=-100)


def data_plane(session: Any) -> DataPlane:
    """Where a DataFrame's ``batches()`` data tasks run: its own Spark session (classic, or a Connect client)."""
    if type(session).__module__.startswith("pyspark.sql.connect"):
        from .connect_data import ConnectDataPlane

        return ConnectDataPlane(session)
    from .spark_data import SparkDataPlane

    return SparkDataPlane(session)


def start_process_server() -> None:
    """``%load_ext``, before anything else of the extension loads: the local process server, where the first runs
    go, starts importing torch (about 2 s, the whole of a first cell's wait) while the kernel loads the magics and the
    notebook sends its next cell. Not with the warm-up off, nor when the notebook already has a Spark session of its
    own (classic or Connect: runs go there), as ``on_load`` decides."""
    if not warm_up_on():
        return
    from .session.notebook import connect_session, own_classic_session

    if connect_session() is None and own_classic_session() is None:
        from .local_server import get_zygote

        get_zygote()


def on_load(warm: bool, busy_runs: Callable[[], list[str]] = lambda: []) -> None:
    """``%load_ext``: with ``warm``, the local process server starts (the first cells run on it), and the embedded
    Spark session may start when a run or a session needs it (``embedded``; never for a ``--local``-only notebook),
    unless the notebook already holds a Spark Connect session (its server's executors are the server's to warm).
    A session the notebook builds later is the embedded one when it asks for nothing else, else its own
    (``give_way``, which waits for the kernel's ``busy_runs`` first: background runs and sweeps, in words)."""
    from .session.notebook import connect_session

    if not warm or connect_session() is not None:
        return
    from .session import autostart, give_way
    from .local_server import get_zygote
    from .session.notebook import own_classic_session

    try:
        give_way.runs_on_embedded = busy_runs
        give_way.install()
    except ImportError:
        return  # no pyspark: --local still works
    # With a session of the notebook's own already up, runs go to it: no process server waits for them meanwhile
    # (``--local`` starts it when first used).
    autostart.enable(get_zygote() if own_classic_session() is None else None)


def may_use_spark(options: RunOptions) -> bool:
    """Whether a run with these options may hold a Spark session's slots (not one on local processes)."""
    return not options.local


def launcher_for(options: RunOptions) -> Launcher:
    """The launcher of the backend that takes a run: chosen once per run (or kept set), here. If the run could use
    the embedded session (the notebook has no session of its own), that session starts warming up in the background
    first (this run goes to local processes meanwhile: ``warming``). With the notebook's own session nothing of ours
    starts, whichever thread the run decides on."""
    _warm_embedded(options)
    return backend_for(options).launcher()


def _warm_embedded(options: RunOptions) -> None:
    if options.local or _connect(options):
        return
    from .session import autostart
    from .session.notebook import own_classic_session

    if autostart.allowed() and own_classic_session() is None:
        autostart.wanted()


def on_unload() -> None:
    from .session import autostart, give_way

    give_way.uninstall()
    autostart.disable()
