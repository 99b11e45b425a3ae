"""Launcher backends, one per file, behind the small interface in ``base``; chosen by ``registry``.

The built-in backends are registered here, and nowhere else. pyspark is imported only by the Spark
backend's modules (``spark*``), when a run chooses it.
"""
from __future__ import annotations

from typing import Any

from ..options import RunOptions
from .base import Capacity, DataPlane, Launcher
from .interrupts import guard_interrupts
from .registry import Backend, backend_for, backends, launcher_for, register, unregister

__all__ = ["Launcher", "Capacity", "DataPlane", "Backend", "register", "unregister", "backends", "backend_for",
           "launcher_for", "data_plane", "on_load", "on_unload", "guard_interrupts"]


def _local(options: RunOptions) -> bool:
    return options.local


def _connect(options: RunOptions) -> bool:
    from .connect import connect_session

    return not options.local and connect_session() is not None


def _warming(options: RunOptions) -> bool:
    from .spark_session import warming  # imports nothing heavy; pyspark only if it is loaded already

    return not (options.local or options.spark_tasks) and warming() and not _connect(options)


register("local", "jupyter_torchdist.launchers.local:LocalLauncher", _local, priority=100)
register("warming", "jupyter_torchdist.launchers.warming:WarmingLauncher", _warming, priority=50)
register("connect", "jupyter_torchdist.launchers.connect:ConnectLauncher", _connect, priority=0)
register("spark", "jupyter_torchdist.launchers.spark:SparkLauncher", lambda options: True, priority=-100)


def data_plane(session: Any) -> DataPlane:
    """Where a DataFrame's ``batches()`` data tasks run: its own Spark session (classic, or a Connect client)."""
    if type(session).__module__.startswith("pyspark.sql.connect"):
        from .connect_data import ConnectDataPlane

        return ConnectDataPlane(session)
    from .spark_data import SparkDataPlane

    return SparkDataPlane(session)


def on_load(warm: bool) -> None:
    """``%load_ext``: with ``warm``, the embedded Spark session starts in the background (unless the notebook
    already holds a Spark Connect session: its server's executors are the server's to warm), and a session the
    notebook builds later stays its own (``give_way``; installed wherever the embedded session starts, so that a
    ``--local``-only notebook never imports pyspark)."""
    from .connect import connect_session

    if not warm or connect_session() is not None:
        return
    from . import give_way
    from .local_server import get_zygote
    from .spark_session import warm_up_async

    try:
        give_way.install()
    except ImportError:
        return  # no pyspark: --local still works
    zygote = get_zygote()  # the first cells run on it while the JVM starts (launchers.warming)
    warm_up_async(before=lambda: zygote.ready.wait(ZYGOTE_FIRST_S), after=lambda: _idle_zygote_goes(zygote))


ZYGOTE_FIRST_S = 10.0  # the JVM waits this long at most for the zygote: on two cores they would slow each other


def _idle_zygote_goes(zygote: Any) -> None:
    """Once the session is warm, the zygote the warm-up started goes unless a run uses it or asked for it."""
    from .local_server import stop_zygote, zygote_if_running

    running = zygote_if_running()
    if running is not None and running is zygote and not running.busy() and not running.asked:
        stop_zygote()


def on_unload() -> None:
    from . import give_way

    give_way.uninstall()
