"""The Spark backend: N barrier tasks, one rank each, on the active (or an embedded local) SparkSession.

Barrier mode gives gang scheduling; everything else (rendezvous, results, failures) goes through
the kernel's own channel, so Spark only places and, if need be, cancels the tasks.
"""
from __future__ import annotations

import functools
import os
import queue
import re
import sys
import threading
from typing import Any, Callable

from ..channel import Inbound
from ..errors import LaunchError
from ..tls import plaintext_warning, tls_requested
from ..gpus import pick_gpu, require_local_gpus
from ..options import RunOptions
from ..rank_main import RunPlan
from .base import JOB_END, LaunchInfo, Launcher

__all__ = ["SparkLauncher", "get_session", "warm_up_async", "stop_embedded_session", "slots_available"]

DAEMON_MODULE = "jupyter_torchdist._daemon"
_session_lock = threading.RLock()
_embedded: Any = None
_warm_thread: threading.Thread | None = None


# -- the session ---------------------------------------------------------------------------------
def _local_slots(master: str) -> int | None:
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if not m:
        return None
    if m.group(1) is None:
        return 1
    return (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1))


_conf_cache: dict[int, tuple[Any, dict[str, str]]] = {}


def _conf_of(sc: Any) -> dict[str, str]:
    """The SparkContext's settings, read once per context: they cannot change while it lives, and
    ``sc.getConf()`` costs tens of milliseconds of py4j calls, a tenth of a rerun."""
    cached = _conf_cache.get(id(sc))
    if cached is None or cached[0] is not sc:
        cached = (sc, _read_conf(sc))
        _conf_cache.clear()
        _conf_cache[id(sc)] = cached
    return cached[1]


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
        return _local_slots(sc.master) or sc.defaultParallelism


def _embedded_builder(slots: int) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return (
        SparkSession.builder.master(f"local[{slots}]")
        .appName("jupyter-torchdist")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.python.daemon.module", DAEMON_MODULE)
        .config("spark.python.worker.reuse", "true")
        .config("spark.python.task.killTimeout", "1s")
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
        .config("spark.log.level", "ERROR")
    )


def default_embedded_slots(n: int = 1) -> int:
    return max(n, 4, os.cpu_count() or 1)


def get_session(min_slots: int) -> tuple[Any, bool]:
    """(session, embedded): the active session, or our embedded local one with >= min_slots."""
    global _embedded
    from pyspark.sql import SparkSession

    with _session_lock:
        active = SparkSession.getActiveSession()
        if active is not None and active is not _embedded:
            return active, False
        if _embedded is not None and slots_available(_embedded) < min_slots:
            _embedded.stop()  # our own session: restart it with enough slots instead of failing
            _embedded = None
        if _embedded is None:
            _embedded = _embedded_builder(default_embedded_slots(min_slots)).getOrCreate()
            _embedded.sparkContext.setLogLevel("ERROR")
        return _embedded, True


def stop_embedded_session() -> None:
    global _embedded
    with _session_lock:
        if _embedded is not None:
            _embedded.stop()
            _embedded = None


def _warm_task(_: Any) -> Any:
    import jupyter_torchdist.agent  # noqa: F401  (workers fork from the daemon with torch imported)

    yield os.getpid()


def warm_up_async() -> threading.Thread:
    """Start the session and its Python workers in the background, so the first run is fast."""
    global _warm_thread

    def warm() -> None:
        try:
            spark, _ = get_session(1)
            slots = slots_available(spark)
            spark.sparkContext.parallelize(range(slots), slots).mapPartitions(_warm_task).collect()
        except Exception:
            pass  # the run itself will say what is wrong

    with _session_lock:
        if _warm_thread is None or not _warm_thread.is_alive():
            _warm_thread = threading.Thread(target=warm, name="jtd-warmup", daemon=True)
            _warm_thread.start()
        return _warm_thread


# -- one job thread for the whole kernel ---------------------------------------------------------
class _Submitter:
    """Runs Spark jobs one after another on one long-lived thread (one JVM thread, no churn)."""

    def __init__(self) -> None:
        self._jobs: "queue.SimpleQueue[Callable[[], None]]" = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="jtd-spark-jobs", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            self._jobs.get()()

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)


_submitter: _Submitter | None = None


def _get_submitter() -> _Submitter:
    global _submitter
    with _session_lock:
        if _submitter is None:
            _submitter = _Submitter()
        return _submitter


# -- the task -------------------------------------------------------------------------------------
def _rank_task(plan: RunPlan, local_gpus: list[str] | None, _: Any) -> Any:
    """One barrier task: rank = partition id. Forks the rank and watches it (see agent.py)."""
    from pyspark import BarrierTaskContext

    from jupyter_torchdist.agent import run_agent

    ctx = BarrierTaskContext.get()
    rank = ctx.partitionId()
    gpu = None
    if plan.gpu:
        gpu = pick_gpu(rank, ctx.resources(), local_gpus)
    yield run_agent(plan, rank, gpu)


def _error_summary(exc: BaseException) -> str:
    """The useful lines of a Spark/py4j error, without the JVM stack."""
    text = str(exc)
    keep = [ln for ln in text.splitlines()
            if ln.strip() and not ln.lstrip().startswith(("at ", "...")) and "JVM stacktrace" not in ln]
    return "\n".join(keep[:30])[:4000] or type(exc).__name__


class SparkLauncher(Launcher):
    def __init__(self) -> None:
        self._spark: Any = None
        self._group: str | None = None
        self._local_gpus: list[str] | None = None
        self._local = True

    def prepare(self, options: RunOptions) -> LaunchInfo:
        try:
            import pyspark  # noqa: F401
        except ImportError:
            raise LaunchError("pyspark is not installed: `pip install pyspark`, or run with --local") from None
        if _warm_thread is not None:
            _warm_thread.join()
        try:
            spark, embedded = get_session(options.n)
        except Exception as exc:
            raise LaunchError(
                f"could not start the embedded Spark session: {_error_summary(exc)}\n"
                "Spark needs Java 17 or newer (`java -version`; set JAVA_HOME), or run with --local."
            ) from None
        self._spark = spark
        sc = spark.sparkContext
        master = sc.master
        self._local = master.startswith("local")
        conf = _conf_of(sc)
        if not self._local and conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
            raise LaunchError(
                "barrier tasks cannot run with dynamic allocation on a cluster: set "
                "spark.dynamicAllocation.enabled=false for this SparkSession (Spark refuses it, SPARK-24942)."
            )
        slots = slots_available(spark)
        if options.n > slots:
            raise LaunchError(
                f"-n {options.n} needs {options.n} task slots at once, but this SparkSession ({master}) has "
                f"{slots}. Ask for fewer ranks, or give the session more slots: local[N] for a local master; "
                "on a cluster more executors or cores (spark.executor.cores, spark.cores.max, "
                "spark.executor.instances) or fewer cpus per task (spark.task.cpus)."
            )
        if options.gpu:
            self._check_gpus(options, conf)
        host = "127.0.0.1" if self._local else (conf.get("spark.driver.host", None) or "127.0.0.1")
        conf_get = lambda key: conf.get(key, None)  # noqa: E731
        tls_on = tls_requested(conf_get)
        warning = plaintext_warning(conf_get, tls_on)
        return LaunchInfo(label=f"spark {master}" + (" (embedded)" if embedded else ""),
                          channel_host=host, loopback=self._local, channel_tls=tls_on,
                          warnings=(warning,) if warning else ())

    def _check_gpus(self, options: RunOptions, conf: Any) -> None:
        if self._local:
            self._local_gpus = require_local_gpus(options.n)
        elif not conf.get("spark.task.resource.gpu.amount", None):
            raise LaunchError(
                "--gpu on a cluster needs GPU scheduling: set spark.task.resource.gpu.amount=1, "
                "spark.executor.resource.gpu.amount and spark.executor.resource.gpu.discoveryScript "
                "when the SparkSession is created."
            )

    def start(self, plan: RunPlan, inbox: "queue.SimpleQueue[Inbound]") -> None:
        self._group = f"jupyter-torchdist-{plan.run_id}"
        sc = self._spark.sparkContext
        task = functools.partial(_rank_task, plan, self._local_gpus)
        group = self._group

        def job() -> None:
            error = None
            try:
                sc.setJobGroup(group, f"%%distribute -n {plan.world_size}", interruptOnCancel=True)
                sc.parallelize(range(plan.world_size), plan.world_size).barrier().mapPartitions(task).collect()
            except BaseException as exc:  # noqa: BLE001 - reported to the supervisor, never lost
                error = _error_summary(exc)
            finally:
                try:
                    sc.setLocalProperty("spark.jobGroup.id", None)
                except Exception:
                    pass
            inbox.put(Inbound(-1, "backend", {"t": JOB_END, "error": error}))

        _get_submitter().submit(job)

    def cancel(self) -> None:
        if self._group is not None and self._spark is not None:
            try:
                self._spark.sparkContext.cancelJobGroup(self._group)
            except Exception:
                pass
