"""The Spark backend: N barrier tasks, one rank each, on the notebook's (or an embedded local) SparkSession.

Barrier mode gives gang scheduling; everything else (rendezvous, results, failures) goes through
the kernel's own channel, so Spark only places and, if need be, cancels the tasks.
"""
from __future__ import annotations

import functools
import os
import queue
import sys
import time
from collections.abc import Callable
from typing import Any

from ..core import contract as C
from ..channel.tls import plaintext_warning, tls_requested
from ..core.contract import Inbound, LaunchInfo, RunPlan
from ..core.errors import LaunchError
from ..core.gpus import gpus_per_task, require_local_gpus, task_ranks
from . import gpu_preflight
from ..core.options import RunOptions
from .session import give_way
from .interrupts import our_jobs
from .limits import check_ranks
from .base import Capacity, Launcher
from .session.master import who_holds_cores
from .spark_jobs import error_summary, explain_worker_python, held_slots, hold, release, submit_job
from .session.tls_consent import require_ssl_consent, session_conf
from .session.embedded import conf_of, dynamic_allocation, get_session, slots_available, wait_for_warm_up

__all__ = ["SparkLauncher"]


# -- the task ----------------------------------------------------------------------------------------
def _rank_task(plan: RunPlan, local_gpus: list[str] | None, per_task: int, _: Any) -> Any:
    """One barrier task: its ranks from the partition id. Forks each rank and watches it (``rank.agent``)."""
    from pyspark import BarrierTaskContext

    from jupyter_torchdist.rank.agent import run_agents

    yield from run_agents(plan, task_ranks(BarrierTaskContext.get(), per_task, plan, local_gpus))


def _rank_task_dynamic(plan: RunPlan, local_gpus: list[str] | None, per_task: int, _: Any) -> Any:
    """One ordinary task (dynamic allocation): its ranks from the partition id; the kernel's rendezvous gangs the
    ranks.

    Spark retries a failed task (and would start a second copy of it); a rank must never run twice, so a later
    attempt of a rank's task starts nothing and says so (the kernel has already seen the first attempt end)."""
    from pyspark import TaskContext

    from jupyter_torchdist.rank.agent import run_agents

    ctx = TaskContext.get()
    assert ctx is not None  # inside a task
    if ctx.attemptNumber() > 0:
        yield {"t": C.EXIT, "rank": ctx.partitionId() * per_task, "retried": ctx.attemptNumber()}
        return
    yield from run_agents(plan, task_ranks(ctx, per_task, plan, local_gpus))


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


def _check_slots(spark: Any, n: int, embedded: bool, wait_s: float, quiet: bool = False) -> None:
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
    _wait_for_slots(spark, n, wait_s, quiet)


def _wait_for_slots(spark: Any, n: int, wait_s: float, quiet: bool = False) -> None:
    """A cluster session may still be getting executors (or other notebooks hold the cores): wait for them, saying
    so on one line (unless ``quiet``: a background run's thread), up to ``wait_s``; an interrupt ends the wait."""
    sc, began = spark.sparkContext, time.monotonic()
    shown = 0.0
    while True:
        slots, held = slots_available(spark), held_slots()
        waited = time.monotonic() - began
        if n <= slots - held:
            if shown and not quiet:
                print(f"\rjupyter-torchdist: {slots} task slots after {waited:.0f} s; starting.{' ' * 30}", flush=True)
            return
        if waited >= wait_s:
            break
        if (waited - shown >= 1.0 or not shown) and not quiet:
            shown = max(waited, 1e-9)
            print(f"\rjupyter-torchdist: waiting for {n} task slots on {sc.master}: {slots - held} so far "
                  f"({_executors(sc)} executors), {waited:.0f} s of up to {wait_s:g} s (interrupt to stop)",
                  end="", flush=True)
        time.sleep(0.2)
    if shown:
        print(flush=True)
    holders = (who_holds_cores(sc.master, conf_of(sc), getattr(sc, "applicationId", None))
               if sc.master.startswith("spark://") else None)  # a standalone master's own view
    raise LaunchError(f"-n {n} needs {n} task slots at once, but after waiting {wait_s:g} s this SparkSession "
                      f"({sc.master}) has {slots - held} ({_executors(sc)} executors): the cluster has no free cores "
                      "for this application (other notebooks or applications hold them), or too few executors were "
                      f"granted{f' ({holders})' if holders else ''}. Ask for fewer ranks; give this session more "
                      "(spark.cores.max, spark.executor.cores, spark.executor.instances, or fewer cpus per task: "
                      "spark.task.cpus); stop idle sessions or kept ranks (%distribute_stop) elsewhere; or wait longer "
                      "(--wait SECONDS).")


_DYNAMIC_HINT = ("With dynamic allocation Spark asks the cluster for an executor for each waiting rank: the cluster "
                 "has no free cores for them (other notebooks or applications hold them), or "
                 "spark.dynamicAllocation.maxExecutors is too low. Ask for fewer ranks, free cores (stop idle sessions "
                 "or kept ranks elsewhere), or wait longer (--wait SECONDS).")


def _honour_python(sc: Any, conf: dict[str, str]) -> None:
    """``spark.pyspark.python`` on the session names the executors' Python; pyspark's SparkContext only reads the
    PYSPARK_PYTHON environment variable for it (a notebook kernel seldom has it set), so ours apply the setting. A
    local master with neither runs its Python workers on this machine: they get the kernel's Python (pyspark would
    take the first ``python3`` on the PATH, seldom the one with torch), said once per session."""
    want = conf.get("spark.pyspark.python")
    if not want and not os.environ.get("PYSPARK_PYTHON") and sc.master.startswith("local"):
        want = sys.executable
        if getattr(sc, "pythonExec", want) != want:
            print(f"jupyter-torchdist: this session ({sc.master}) names no Python for its workers (neither "
                  f"spark.pyspark.python nor PYSPARK_PYTHON): they run the kernel's, {want}.", file=sys.stderr)
    if want and getattr(sc, "pythonExec", want) != want:
        sc.pythonExec = want


def _check_dynamic(conf: dict[str, str], n: int, wait_s: float) -> None:
    """Dynamic allocation: the ranks are ordinary tasks (Spark refuses barrier stages there, SPARK-24942), gang-
    started by the kernel's rendezvous. What would start a second copy of a rank, or can never give N slots, is
    refused before anything is submitted."""
    if conf.get("spark.speculation", "false").lower() == "true":
        raise LaunchError("this SparkSession has dynamic allocation and spark.speculation=true: Spark would start "
                          "second copies of slow rank tasks, and a rank must run once. Create the session with "
                          "spark.speculation=false.")
    most = _most_slots(conf)
    if most is not None and n > most:
        raise LaunchError(f"-n {n} needs {n} task slots at once, but this SparkSession's dynamic allocation allows at "
                          f"most {most} (spark.dynamicAllocation.maxExecutors x spark.executor.cores / "
                          "spark.task.cpus): ask for fewer ranks, or allow more executors.")
    if wait_s <= 0:
        raise LaunchError("with dynamic allocation the ranks wait for the executors Spark asks for: --wait 0 leaves "
                          "them no time. Give a bound in seconds (--wait 120 is the default).")


def _most_slots(conf: dict[str, str]) -> int | None:
    """The most task slots dynamic allocation may ever give this session, where its settings bound it."""
    try:
        executors = int(conf["spark.dynamicAllocation.maxExecutors"])
        cores = int(conf.get("spark.executor.cores") or 0)
        per_task = max(1, int(conf.get("spark.task.cpus") or 1))
    except (KeyError, ValueError):
        return None
    return executors * (cores // per_task) if cores else None


def _retried(ends: list[Any]) -> str | None:
    """A rank task Spark ran again after its first attempt failed (dynamic allocation): the run's job error."""
    again = sorted(e["rank"] for e in ends if isinstance(e, dict) and e.get("retried"))
    if not again:
        return None
    return (f"Spark ran the task of rank {again[0]} again after its first attempt ended (its process or executor "
            "was lost); a rank never runs twice, so the run ends here.")


def _executor_hosts(sc: Any) -> list[str]:
    """The hosts of the session's executors (the driver's own entry left out), for messages."""
    try:
        status = sc._jsc.sc().getExecutorMemoryStatus()
        driver = f"{sc.getConf().get('spark.driver.host', '')}:"
        keys = [str(k) for k in sc._jvm.scala.jdk.javaapi.CollectionConverters.asJava(status.keySet())]
    except Exception:
        return []
    return sorted({k.rsplit(":", 1)[0] for k in keys if not k.startswith(driver)}) or sorted(
        {k.rsplit(":", 1)[0] for k in keys})


def _give_up_executors(sc: Any, addresses: set[str]) -> list[str]:
    """Ask Spark to drop (and replace) every executor on these hosts now, as its own heartbeat timeout would a
    minute or two later: until then it would place tasks on them, and a rerun would wait for an unreachable
    host. Returns the executors given up."""
    given_up = []
    try:
        executors = sc._jsc.sc().statusStore().executorList(True).iterator()
        while executors.hasNext():
            e = executors.next()
            if e.id() != "driver" and str(e.hostPort()).rsplit(":", 1)[0] in addresses:
                if sc._jsc.sc().killAndReplaceExecutor(e.id()):
                    given_up.append(str(e.id()))
    except Exception:
        pass  # a Spark without these internals finds out by itself (spark.network.timeout)
    return given_up


def _executors(sc: Any) -> int:
    try:
        return max(0, int(sc._jsc.sc().getExecutorMemoryStatus().size()) - 1)  # less the driver
    except Exception:
        return 0


def _ui_url(sc: Any) -> str | None:
    """The Spark UI's address (None when ``spark.ui.enabled`` is false): the runs panel links a run to it."""
    try:
        url = sc.uiWebUrl
    except Exception:  # a JVM that went away while the run was being placed: the run fails elsewhere, plainly
        return None
    return str(url) if url else None


class SparkLauncher(Launcher):
    """Ranks as the barrier tasks of one Spark job on a classic SparkSession (the notebook's or the embedded one)."""

    name = "spark"
    slot_noun = "Spark task slots"

    def __init__(self) -> None:
        self._spark: Any = None
        self._group: str | None = None
        self._local_gpus: list[str] | None = None
        self._local = True
        self._dynamic = False
        self._per_task = 1  # ranks per task: one, or one per GPU of a task that holds several

    def prepare(self, options: RunOptions) -> LaunchInfo:
        spark, embedded = _session()
        if embedded:
            check_ranks("embedded_ranks", options.n)
        self._spark, sc = spark, spark.sparkContext
        self._local = sc.master.startswith("local")
        conf = conf_of(sc)
        _honour_python(sc, conf)
        # before any wait for slots
        ssl_note = require_ssl_consent(session_conf(spark), tls_requested(conf.get), options.ssl_switch)
        self._dynamic = not self._local and dynamic_allocation(conf)
        self._per_task = 1
        if options.gpu:  # before the slot check: a task with several GPUs runs several ranks
            self._check_gpus(options, conf)
        if self._dynamic:
            _check_dynamic(conf, self.tasks_for(options.n), options.wait)
        else:
            _check_slots(spark, self.tasks_for(options.n), embedded, options.wait, quiet=options.background)
        if options.gpu and not self._local:  # the executors' torch, before any rank starts (after the slot wait)
            gpu_preflight.preflight_classic(sc, self.tasks_for(options.n), _executor_hosts(sc), not self._dynamic)
        host = "127.0.0.1" if self._local else (conf.get("spark.driver.host") or "127.0.0.1")
        tls_on = tls_requested(conf.get)
        warning = ssl_note or plaintext_warning(conf.get, tls_on)
        label = f"spark {sc.master}" + (" (embedded)" if embedded else " (dynamic allocation)" if self._dynamic else "")
        return LaunchInfo(label=label, channel_host=host, loopback=self._local, channel_tls=tls_on,
                          warnings=(warning,) if warning else (), watcher="the Spark task (its Python worker)",
                          lost_hint="The executor's log says why.",
                          start_bound_s=options.wait if self._dynamic else None,
                          start_hint=_DYNAMIC_HINT if self._dynamic else "", ranks_per_task=self._per_task,
                          ui_url=_ui_url(sc))

    def _check_gpus(self, options: RunOptions, conf: dict[str, str]) -> None:
        """The kernel's GPUs on a local master; on a cluster, Spark's GPU scheduling, and a rank per GPU of a task."""
        if self._local:
            self._local_gpus = require_local_gpus(options.n, options.gpus)
            return
        self._per_task = per_task = gpus_per_task(conf.get("spark.task.resource.gpu.amount"))
        if options.n % per_task:
            raise LaunchError(f"--gpu: spark.task.resource.gpu.amount={per_task} gives each Spark task {per_task} "
                              f"GPUs and a rank on each, so -n must be a multiple of {per_task} (asked {options.n}). "
                              "Ask for a multiple, or set spark.task.resource.gpu.amount=1 on the session.")

    def tasks_for(self, ranks: int) -> int:
        """How many tasks (and task slots) a run of ``ranks`` ranks takes: one each, or one per ``per_task`` ranks
        when each task holds several GPUs."""
        return -(-ranks // self._per_task)

    def task(self, plan: RunPlan) -> Callable[[Any], Any]:
        """What each task runs (its partition id says its ranks)."""
        return functools.partial(_rank_task_dynamic if self._dynamic else _rank_task, plan, self._local_gpus,
                                 self._per_task)

    def start(self, plan: RunPlan, inbox: queue.SimpleQueue[Inbound]) -> None:
        group = self._group = f"jupyter-torchdist-{plan.run_id}"
        sc = self._spark.sparkContext
        dynamic = self._dynamic
        task, count = self.task(plan), self.tasks_for(plan.world_size)

        def job() -> None:
            error = None
            try:
                sc.setJobGroup(group, f"%%distribute -n {plan.world_size}", interruptOnCancel=True)
                ranks = sc.parallelize(range(count), count)
                with our_jobs(group):
                    ends = (ranks if dynamic else ranks.barrier()).mapPartitions(task).collect()
                error = _retried(ends)
            except BaseException as exc:
                error = explain_worker_python(error_summary(exc), sc.pythonExec, _executor_hosts(sc))
            finally:
                release(plan.run_id)
                try:
                    sc.setLocalProperty("spark.jobGroup.id", None)
                except Exception:
                    pass
            inbox.put(Inbound(-1, C.BACKEND, {"t": C.JOB_END, "error": error}))

        if plan.keep:
            hold(plan.run_id, count)
        submit_job(job, lane=f"run-{plan.run_id}")  # a lane of its own: runs at once; kept ranks hold it for good

    def capacity(self) -> Capacity:
        spark, _ = _session()
        sc = spark.sparkContext
        return Capacity(slots=slots_available(spark) - held_slots(), default_ranks=int(sc.defaultParallelism),
                        where=f"this SparkSession ({sc.master})")

    def lost_hosts(self, addresses: set[str]) -> None:
        if addresses and self._spark is not None and not self._local:
            _give_up_executors(self._spark.sparkContext, addresses)

    def cancel(self) -> None:
        if self._group is not None and self._spark is not None:
            try:
                self._spark.sparkContext.cancelJobGroup(self._group)
            except Exception:
                pass
