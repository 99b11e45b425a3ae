"""The Spark backend: N barrier tasks, one rank each, on the notebook's (or an embedded local) SparkSession.

Barrier mode gives gang scheduling; everything else (rendezvous, results, failures) goes through
the kernel's own channel, so Spark only places and, if need be, cancels the tasks.
"""
from __future__ import annotations

import functools
import queue
import time
from typing import Any

from .. import contract as C
from ..channel.tls import plaintext_warning, tls_requested
from ..contract import Inbound, LaunchInfo, RunPlan
from ..errors import LaunchError
from ..gpus import pick_gpu, require_local_gpus
from ..options import RunOptions
from . import give_way
from .base import Capacity, Launcher
from .spark_jobs import error_summary, held_slots, hold, release, submit_job
from .spark_security import require_ssl_consent, session_conf
from .spark_session import conf_of, get_session, slots_available, wait_for_warm_up

__all__ = ["SparkLauncher"]


# -- the task ----------------------------------------------------------------------------------------
def _rank_task(plan: RunPlan, local_gpus: list[str] | None, _: Any) -> Any:
    """One barrier task: rank = partition id. Forks the rank and watches it (``rank.agent``)."""
    from pyspark import BarrierTaskContext

    from jupyter_torchdist.rank.agent import run_agent

    ctx = BarrierTaskContext.get()
    rank = ctx.partitionId()
    gpu = pick_gpu(rank, ctx.resources(), local_gpus) if plan.gpu else None
    yield run_agent(plan, rank, gpu)


def _session() -> tuple[Any, bool]:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise LaunchError("pyspark is not installed: `pip install pyspark`, or run with --local") from None
    wait_for_warm_up()
    try:
        session, embedded = get_session()
    except Exception as exc:
        raise LaunchError(f"could not start the embedded Spark session: {error_summary(exc)}\n"
                          "Spark needs Java 17 or newer (`java -version`; set JAVA_HOME), or run with --local.") \
            from None
    if embedded:
        give_way.install()  # a session the notebook builds later is its own, not this one
    return session, embedded


def _check_slots(spark: Any, n: int, embedded: bool, wait_s: float) -> None:
    slots, held = slots_available(spark), held_slots()
    if n <= slots - held:
        return
    if held and n <= slots:
        raise LaunchError(f"-n {n} needs {n} free task slots, but kept ranks hold {held} of this SparkSession's "
                          f"{slots}: stop them first (%distribute_stop), or ask for at most {slots - held} ranks.")
    master = spark.sparkContext.master
    if embedded or master == "local" or master.startswith("local[") or wait_s <= 0:
        more = ("set JUPYTER_TORCHDIST_SPARK_SLOTS before the first run (the embedded session has a fixed size)"
                if embedded else "local[N] for a local master; on a cluster more executors or cores "
                "(spark.executor.cores, spark.cores.max, spark.executor.instances) or fewer cpus per task "
                "(spark.task.cpus), or --wait SECONDS for executors still starting")
        raise LaunchError(f"-n {n} needs {n} task slots at once, but this SparkSession ({master}) has {slots}. "
                          f"Ask for fewer ranks, or give the session more slots: {more}.")
    _wait_for_slots(spark, n, wait_s)


def _wait_for_slots(spark: Any, n: int, wait_s: float) -> None:
    """A cluster session may still be getting executors (or other notebooks hold the cores): wait for them, saying
    so on one line, up to ``wait_s``; an interrupt ends the wait."""
    sc, began = spark.sparkContext, time.monotonic()
    shown = 0.0
    while True:
        slots, held = slots_available(spark), held_slots()
        waited = time.monotonic() - began
        if n <= slots - held:
            if shown:
                print(f"\rjupyter-torchdist: {slots} task slots after {waited:.0f} s; starting.{' ' * 30}", flush=True)
            return
        if waited >= wait_s:
            break
        if waited - shown >= 1.0 or not shown:
            shown = max(waited, 1e-9)
            print(f"\rjupyter-torchdist: waiting for {n} task slots on {sc.master}: {slots - held} so far "
                  f"({_executors(sc)} executors), {waited:.0f} s of up to {wait_s:g} s (interrupt to stop)",
                  end="", flush=True)
        time.sleep(0.2)
    print(flush=True)
    raise LaunchError(f"-n {n} needs {n} task slots at once, but after waiting {wait_s:g} s this SparkSession "
                      f"({sc.master}) has {slots - held} ({_executors(sc)} executors): the cluster has no free cores "
                      "for this application (other notebooks or applications hold them), or too few executors were "
                      "granted. Ask for fewer ranks; give this session more (spark.cores.max, spark.executor.cores, "
                      "spark.executor.instances, or fewer cpus per task: spark.task.cpus); stop idle sessions or kept "
                      "ranks (%distribute_stop) elsewhere; or wait longer (--wait SECONDS).")


def _executors(sc: Any) -> int:
    try:
        return max(0, int(sc._jsc.sc().getExecutorMemoryStatus().size()) - 1)  # less the driver
    except Exception:
        return 0


class SparkLauncher(Launcher):
    """Ranks as the barrier tasks of one Spark job on a classic SparkSession (the notebook's or the embedded one)."""

    name = "spark"
    slot_noun = "Spark task slots"

    def __init__(self) -> None:
        self._spark: Any = None
        self._group: str | None = None
        self._local_gpus: list[str] | None = None
        self._local = True

    def prepare(self, options: RunOptions) -> LaunchInfo:
        spark, embedded = _session()
        self._spark, sc = spark, spark.sparkContext
        self._local = sc.master.startswith("local")
        conf = conf_of(sc)
        if not self._local and conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
            raise LaunchError("barrier tasks cannot run with dynamic allocation on a cluster: set "
                              "spark.dynamicAllocation.enabled=false for this SparkSession (Spark refuses it, "
                              "SPARK-24942).")
        ssl_note = require_ssl_consent(session_conf(spark), tls_requested(conf.get))  # before any wait for slots
        _check_slots(spark, options.n, embedded, options.wait)
        if options.gpu:
            self._check_gpus(options, conf)
        host = "127.0.0.1" if self._local else (conf.get("spark.driver.host") or "127.0.0.1")
        tls_on = tls_requested(conf.get)
        warning = ssl_note or plaintext_warning(conf.get, tls_on)
        return LaunchInfo(label=f"spark {sc.master}" + (" (embedded)" if embedded else ""), channel_host=host,
                          loopback=self._local, channel_tls=tls_on, warnings=(warning,) if warning else (),
                          watcher="the Spark task (its Python worker)",
                          lost_hint="The executor's log says why.")

    def _check_gpus(self, options: RunOptions, conf: dict[str, str]) -> None:
        if self._local:
            self._local_gpus = require_local_gpus(options.n)
        elif not conf.get("spark.task.resource.gpu.amount"):
            raise LaunchError("--gpu on a cluster needs GPU scheduling: set spark.task.resource.gpu.amount=1, "
                              "spark.executor.resource.gpu.amount and spark.executor.resource.gpu.discoveryScript "
                              "when the SparkSession is created.")

    def start(self, plan: RunPlan, inbox: queue.SimpleQueue[Inbound]) -> None:
        group = self._group = f"jupyter-torchdist-{plan.run_id}"
        sc = self._spark.sparkContext
        task = functools.partial(_rank_task, plan, self._local_gpus)

        def job() -> None:
            error = None
            try:
                sc.setJobGroup(group, f"%%distribute -n {plan.world_size}", interruptOnCancel=True)
                sc.parallelize(range(plan.world_size), plan.world_size).barrier().mapPartitions(task).collect()
            except BaseException as exc:
                error = error_summary(exc)
            finally:
                release(plan.run_id)
                try:
                    sc.setLocalProperty("spark.jobGroup.id", None)
                except Exception:
                    pass
            inbox.put(Inbound(-1, C.BACKEND, {"t": C.JOB_END, "error": error}))

        if plan.keep:
            hold(plan.run_id, plan.world_size)
        submit_job(job, lane="kept" if plan.keep else "runs")  # kept ranks hold their thread for their lifetime

    def capacity(self) -> Capacity:
        spark, _ = _session()
        sc = spark.sparkContext
        return Capacity(slots=slots_available(spark) - held_slots(), default_ranks=int(sc.defaultParallelism),
                        where=f"this SparkSession ({sc.master})")

    def cancel(self) -> None:
        if self._group is not None and self._spark is not None:
            try:
                self._spark.sparkContext.cancelJobGroup(self._group)
            except Exception:
                pass
