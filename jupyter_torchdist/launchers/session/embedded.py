"""The SparkSession runs go to: the notebook's own (a cluster), or an embedded local one we start quietly.

The embedded session is made once per kernel with slots for every run a notebook may hold at once
(ranks, kept ranks, data workers), so it never has to restart and kill work in progress. Its JVM's
start-up chatter goes to a log file (``session_log()``), not into the cell, unless the start fails.
Once up it is the notebook's active session: ``SparkSession.getActiveSession()`` returns it on the
kernel's main thread, so DataFrames built beside training cells share it.
"""
from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from . import class_archive, jvm as spark_jvm
from .notebook import is_embedded, mark_ours
from .jvm import session_log

__all__ = ["get_session", "dynamic_allocation", "embedded_session", "local_slots", "stop_embedded_session",
           "warm_up_async", "activate", "activate_embedded", "slots_available", "conf_of", "session_log",
           "embedded_slots", "is_embedded", "driver_resources", "session_master",
           "driver_has_gpu", "warming", "wait_for_warm_up", "building", "warm_workers", "SLOTS_ENV",
           "DAEMON_MODULE", "JVM_OPTIONS", "rehearse"]

DAEMON_MODULE: Final = "jupyter_torchdist._daemon"
SLOTS_ENV: Final = "JUPYTER_TORCHDIST_SPARK_SLOTS"
DEFAULT_SLOTS: Final = 256   # task slots of the embedded local master: threads, not processes, until used
WARM_WORKERS: Final = 4      # Python workers forked by the warm-up (more come from the warm daemon on demand)
JVM_OPTIONS: Final = "-XX:+UseSerialGC -Xms32m -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30"

_session_lock = threading.RLock()
_embedded: Any = None
_warm_thread: threading.Thread | None = None
_conf_cache: dict[int, tuple[Any, dict[str, str]]] = {}
timeline: dict[str, float] = {}  # the warm-up's moments (time.time()): where a fresh notebook's seconds go


def embedded_slots() -> int:
    """How many task slots the embedded session gets (``JUPYTER_TORCHDIST_SPARK_SLOTS`` to change it)."""
    text = os.environ.get(SLOTS_ENV, "").strip()
    if text.isdigit() and int(text) > 0:
        return int(text)
    return DEFAULT_SLOTS


# -- settings ---------------------------------------------------------------------------------------
def local_slots(master: str) -> int | None:
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if not m:
        return None
    if m.group(1) is None:
        return 1
    return (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1))


def conf_of(sc: Any) -> dict[str, str]:
    """The SparkContext's settings, read once per context: they cannot change while it lives, and
    ``sc.getConf()`` costs tens of milliseconds of py4j calls, a tenth of a rerun."""
    cached = _conf_cache.get(id(sc))
    if cached is None or cached[0] is not sc:
        cached = (sc, _read_conf(sc))
        _conf_cache.clear()
        _conf_cache[id(sc)] = cached
    return cached[1]


def dynamic_allocation(conf: dict[str, str]) -> bool:
    """Whether the session gives executors back when idle and asks for them as tasks wait."""
    return conf.get("spark.dynamicAllocation.enabled", "false").strip().lower() == "true"


def _read_conf(sc: Any) -> dict[str, str]:
    try:  # one py4j call ("key=value" lines) instead of two per setting
        text = sc._conf.toDebugString()
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    except Exception:
        return dict(sc.getConf().getAll())


def slots_available(spark: Any) -> int:
    """How many barrier tasks the session can run at once (what Spark's own slot check uses)."""
    sc = spark.sparkContext
    try:
        jsc = sc._jsc.sc()
        return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
    except Exception:
        return local_slots(sc.master) or int(sc.defaultParallelism)


# -- the embedded session ----------------------------------------------------------------------------
def _driver_memory() -> str:
    """The embedded JVM's heap: a quarter of this machine's memory, between 1 and 4 GB. Its data moves through the
    JVM (DataFrames, batches() data jobs, Arrow buffers), and Spark's 1 GB default runs out with large rows."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return "1g"
    return f"{max(1024, min(4096, total // 4 // (1 << 20)))}m"


def _embedded_conf(slots: int) -> dict[str, str]:
    """The embedded session's settings. They stay its own: nothing here goes into the kernel's environment, and the
    JVM forgets them once the session is up (``_forget_launch_settings``), so a session the notebook builds later
    gets none of them."""
    python = os.environ.get("PYSPARK_PYTHON") or sys.executable
    return {
        "spark.master": f"local[{slots}]", "spark.app.name": "jupyter-torchdist",
        "spark.default.parallelism": str(max(2, os.cpu_count() or 1)),  # user jobs split by cores, not slots
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
        "spark.python.daemon.module": DAEMON_MODULE, "spark.python.worker.reuse": "true",
        "spark.python.task.killTimeout": "1s", "spark.pyspark.python": python, "spark.log.level": "ERROR",
        "spark.driver.memory": _driver_memory(),
        # A notebook's driver JVM mostly schedules: the serial collector and a heap that starts small and gives free
        # space back keep it near 300 MB resident instead of nearly 400 (G1 keeps what it once grew to).
        # With the archive of Spark's classes (``class_archive``) it starts in about half the time and CPU.
        "spark.driver.extraJavaOptions": f"{JVM_OPTIONS} {class_archive.java_options()}".rstrip(),
        # Spark sizes its RPC dispatcher by the master's cores: local[256] would keep 256 idle threads (about 35 MB
        # of stacks). Scheduling messages for a notebook's runs need a handful.
        "spark.rpc.netty.dispatcher.numThreads": str(max(4, os.cpu_count() or 1)),
    }


_building = threading.local()  # this thread builds the embedded session: give_way's check stands aside


def building() -> bool:
    """Whether the calling thread is building the embedded session right now."""
    return getattr(_building, "on", False)


def _start_embedded() -> Any:
    from pyspark.sql import SparkSession

    conf = _embedded_conf(embedded_slots())
    _building.on = True
    try:
        spark_jvm.quiet_gateway(conf)
        builder = SparkSession.builder
        for key, value in conf.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
    except Exception as exc:
        tail = spark_jvm.log_tail()
        raise RuntimeError(f"{exc}" + (f"\n--- the JVM said ({spark_jvm.session_log()}) ---\n{tail}" if tail
                                       else "")) from None
    finally:
        _building.on = False
    spark_jvm.forget_launch_settings(session, conf)
    class_archive.note_layout(session)
    session.sparkContext.pythonExec = conf["spark.pyspark.python"]  # pyspark reads PYSPARK_PYTHON, which we leave
    session.sparkContext.setLogLevel("ERROR")
    return session


def get_session() -> tuple[Any, bool]:
    """(session, embedded): the notebook's own session (as its main thread sees it, whichever thread asks:
    ``notebook.own_classic_session``), or our embedded local one, started if need be."""
    global _embedded
    from .notebook import own_classic_session

    with _session_lock:
        own = own_classic_session()
        if own is not None:
            activate(own)
            return own, False
        if _embedded is None:
            _embedded = _start_embedded()
            mark_ours(_embedded)
        activate(_embedded)
        return _embedded, True


def activate(session: Any) -> None:
    """Make ``session`` the active one for the calling thread (it is per thread, in the JVM and here)."""
    from pyspark.sql import SparkSession

    if SparkSession.getActiveSession() is not session:
        session._jvm.SparkSession.setActiveSession(session._jsparkSession)
        SparkSession._activeSession = session


_activated: tuple[Any, int] | None = None  # the embedded session, and the thread it was last found active on


def activate_embedded() -> None:
    """Make the embedded session active on this thread if it is up and no other session is active.

    It runs before every cell of the notebook, and asking the JVM takes four round trips (about 2.6 ms, a tenth of
    a kept cell): once the session was found active on this thread, and pyspark's own record of the active session
    is still it (a session the notebook builds, or stops, changes that record), the JVM is not asked again."""
    global _activated
    session = _embedded
    if session is None or "pyspark" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    here = threading.get_ident()
    if _activated == (session, here) and getattr(SparkSession, "_activeSession", None) is session:
        return
    try:
        active = SparkSession.getActiveSession()
        if active is None:
            activate(session)
            active = session
        _activated = (session, here) if active is session else None
    except Exception:
        pass  # a session being stopped right now: the next cell tries again


def embedded_session() -> Any:
    """The embedded session if it is up, else None."""
    return _embedded


def driver_resources(session: Any) -> Any:
    """The resources Spark found for the driver of a classic ``session`` (``{"gpu": ResourceInformation}``); None
    when the session cannot say (a Connect client, a stopped context)."""
    try:
        return session.sparkContext.resources
    except Exception:
        return None


def session_master(session: Any) -> str:
    """A classic ``session``'s master URL ("local[4]", "spark://head:7077"); empty when it cannot say."""
    try:
        return str(session.sparkContext.master)
    except Exception:
        return ""


def driver_has_gpu(session: Any) -> bool | None:
    """Whether the driver of a classic ``session`` found a "gpu" resource; None when the session cannot say."""
    try:
        return "gpu" in session.sparkContext.resources
    except Exception:
        return None


def stop_embedded_session(jvm: bool = False) -> None:
    """Stop the embedded session; with ``jvm``, the JVM started for it too (and with it its Python daemon and
    workers), so that the next session is started in a JVM of its own with exactly its own settings."""
    global _embedded
    with _session_lock:
        if _embedded is not None:
            _embedded.stop()
            _embedded = None
            mark_ours(None)
        if jvm and spark_jvm.jvm_is_ours():
            spark_jvm.stop_jvm()
            _conf_cache.clear()


def rehearse() -> None:
    """Start the embedded session, run what a notebook's first cells run (Python workers, a SQL job, a barrier job),
    and stop it with its JVM: ``jupyter-torchdist prepare`` records the classes those load (``class_archive``)."""
    spark, _ = get_session()
    try:
        warm_workers(1)
        spark.range(8).selectExpr("sum(id)").collect()
        spark.sparkContext.parallelize(range(1), 1).barrier().mapPartitions(_warm_task).collect()
    finally:
        stop_embedded_session(jvm=True)


def _warm_task(_: Any) -> Any:
    import jupyter_torchdist.rank.agent  # noqa: F401  (workers fork from the daemon with torch imported)

    yield os.getpid()


def warm_up_async(before: Callable[[], object] | None = None,
                  after: Callable[[], object] | None = None) -> threading.Thread:
    """Start the session and a few Python workers in the background, so the first run is fast. ``before`` runs
    first on the same thread (what the first cells need sooner), ``after`` once the session is warm."""
    global _warm_thread

    def warm() -> None:
        try:
            timeline["warm_up_began"] = time.time()
            if before is not None:
                before()
            timeline["session_asked"] = time.time()
            spark, _ = get_session()
            timeline["session_up"] = time.time()
            n = min(WARM_WORKERS, slots_available(spark))
            spark.sparkContext.parallelize(range(n), n).mapPartitions(_warm_task).collect()
            timeline["workers_warm"] = time.time()
            class_archive.build_in_background()  # once per environment: later sessions start from it
        except Exception:
            pass  # the run itself will say what is wrong
        finally:
            if after is not None:
                after()

    with _session_lock:
        if _warm_thread is None or not _warm_thread.is_alive():
            _warm_thread = threading.Thread(target=warm, name="jtd-warmup", daemon=True)
            _warm_thread.start()
        return _warm_thread


def warm_workers(n: int = WARM_WORKERS) -> None:
    """Fork ``n`` Python workers from the embedded session's daemon with a no-op job (after an idle release)."""
    session = _embedded
    if session is None:
        return
    try:
        n = min(n, slots_available(session))
        session.sparkContext.parallelize(range(n), n).mapPartitions(_warm_task).collect()
    except Exception:
        pass  # the next run forks its workers itself


def warming() -> bool:
    """The embedded session is still starting in the background and the notebook has no session of its own: a run
    on this machine need not wait for it (``launchers.warming``). Cheap; imports nothing."""
    thread = _warm_thread
    if thread is None or not thread.is_alive() or thread is threading.current_thread():
        return False
    if "pyspark.sql" not in sys.modules:
        return True
    from .notebook import own_classic_session

    try:  # the notebook's own session as its main thread sees it: never this thread's (a background run's)
        return own_classic_session() is None
    except Exception:
        return True  # the JVM is still starting


def wait_for_warm_up() -> None:
    """A run waits for a warm-up in flight instead of starting a second session beside it."""
    thread = _warm_thread
    if thread is not None and thread is not threading.current_thread():
        thread.join()
