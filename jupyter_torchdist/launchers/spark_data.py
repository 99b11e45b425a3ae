"""The data plane of a classic SparkSession: where ``batches()`` data tasks run beside the ranks, and how."""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from .interrupts import claim, unclaim
from .spark_jobs import error_summary, held_slots, submit_job
from .session.embedded import conf_of, dynamic_allocation, slots_available

__all__ = ["SparkDataPlane", "PlaneBase", "default_data_workers", "partition_counts"]


def default_data_workers(master: str, ranks: int, free: int) -> int:
    """The session's task slots beyond the ranks' (``free``); on a local master, its cores beyond the ranks'.
    At least 1."""
    cores = _local_cores(master)
    return max(1, (cores - ranks) if cores is not None else free)


def _local_cores(master: str) -> int | None:
    if not master.startswith("local"):
        return None
    inside = master[master.find("[") + 1:master.find("]")] if "[" in master else "1"
    first = inside.split(",")[0].strip()
    cores = os.cpu_count() or 1
    return cores if first == "*" else min(cores, int(first)) if first.isdigit() else cores


def partition_counts(rows: Any) -> list[int]:
    """Rows per partition from the counting tasks' (p, n) rows (every partition's task yields one)."""
    counts = [0] * (max((int(r["p"]) for r in rows), default=-1) + 1)
    for row in rows:
        counts[int(row["p"])] = int(row["n"])
    return counts


class PlaneBase:
    """What every Spark session's data plane does alike."""

    master: str

    def default_workers(self, ranks: int, free: int) -> int:
        return default_data_workers(self.master, ranks, free)

    def describe(self, exc: BaseException) -> str:
        return error_summary(exc)


class SparkDataPlane(PlaneBase):
    """Data tasks of one SparkSession (the DataFrame's own)."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self._sc = session.sparkContext
        self.master: str = self._sc.master
        self.local: bool = self.master.startswith("local")  # executors on the kernel's host
        self.grows: bool = not self.local and dynamic_allocation(conf_of(self._sc))
        self._piece_property = ""

    def session(self) -> Any:
        return self._session

    def conf(self) -> dict[str, str]:
        return conf_of(self._sc)

    def data_slots(self) -> int:
        """Task slots a data task can use: with GPU scheduling, every core of every executor (data tasks ask
        for no GPU); otherwise the session's task slots."""
        conf = self.conf()
        if not conf.get("spark.task.resource.gpu.amount") or self.local:
            return slots_available(self._session)
        executors = max(0, int(self._sc._jsc.sc().getExecutorMemoryStatus().size()) - 1)  # less the driver
        cores = int(conf.get("spark.executor.cores", "1") or 1) // max(1, int(conf.get("spark.task.cpus", "1") or 1))
        return executors * cores

    def free_slots(self, ranks_in_slots: int) -> int:
        return self.data_slots() - held_slots() - ranks_in_slots

    def submit(self, job: Callable[[], None], lane: str) -> None:
        submit_job(job, lane=lane)

    def cancel(self, group: str) -> None:
        try:
            self._sc.cancelJobGroup(group)
        except Exception:
            pass

    def begin(self, group: str, what: str) -> None:
        claim(group)  # an interrupt of another cell leaves these jobs running
        self._sc.setJobGroup(group, what, interruptOnCancel=True)

    def end(self, group: str) -> None:
        unclaim(group)
        for key in (self._piece_property, "spark.jobGroup.id"):
            if key:
                self._sc.setLocalProperty(key, None)

    def partitions(self, df: Any) -> int | None:
        return int(df.rdd.getNumPartitions())

    def count_rows(self, df: Any, counter: Callable[[Any], Any]) -> list[int]:
        """Only a literal is selected, so Spark reads no data column it need not; the count runs with the data
        tasks' own task profile."""
        from pyspark.sql import functions as F

        counted = df.select(F.lit(1).alias("one")).mapInArrow(counter, "p long, n long")
        return partition_counts(_resources(counted.rdd, self.conf()).collect())

    def piece_runner(self, source: Any, make_producer: Callable[[dict[str, Any] | None], Any], schema: str,
                     piece_property: str) -> Callable[[dict[str, Any]], str]:
        """One mapped DataFrame for the epoch; each piece's job runs its one partition, the piece in a local
        property of the job."""
        rdd = _resources(source.mapInArrow(make_producer(None), schema).rdd, self.conf())
        self._piece_property = piece_property

        def run(piece: dict[str, Any]) -> str:
            self._sc.setLocalProperty(piece_property, json.dumps(piece))
            return _run_partition(self._sc, rdd, int(piece["partition"]))

        return run


# One data profile per application and settings. Spark numbers every profile built, and executors serve one
# profile id only: a new profile per job would ask for new executors each time, which under spark.cores.max wait
# for the last job's executors to go idle (executorIdleTimeout, 60 s by default) before every epoch's first batch.
_PROFILES: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
_PROFILE_KEYS = ("spark.task.cpus", "spark.executor.cores", "spark.executor.memory", "spark.dynamicAllocation.enabled")


def _resources(rdd: Any, conf: dict[str, str]) -> Any:
    """With GPU scheduling, ranks take the GPU task slots; data tasks ask for one CPU and no GPU, so they run
    in the executors' other slots (a stage-level TaskResourceProfile). With dynamic allocation as well, their
    profile asks for executors of their own without GPUs, which the cluster can place on CPU-only hosts (the
    GPU hosts' cores go to the ranks): a cluster of GPU and CPU-only machines, each doing what it is for."""
    if not conf.get("spark.task.resource.gpu.amount"):
        return rdd
    key = (str(conf.get("spark.app.id", "")), tuple((k, conf.get(k, "")) for k in _PROFILE_KEYS))
    if key not in _PROFILES:
        _PROFILES.clear()  # another application: its profiles mean nothing to this one
        _PROFILES[key] = _data_profile(conf)
    return rdd.withResources(_PROFILES[key])


def _data_profile(conf: dict[str, str]) -> Any:
    from pyspark.resource import ExecutorResourceRequests, ResourceProfileBuilder, TaskResourceRequests

    cpus = int(conf.get("spark.task.cpus", "1") or 1)
    builder = ResourceProfileBuilder().require(TaskResourceRequests().cpus(cpus))
    if dynamic_allocation(conf):
        executors = ExecutorResourceRequests().cores(int(conf.get("spark.executor.cores", "1") or 1))
        if conf.get("spark.executor.memory"):
            executors = executors.memory(conf["spark.executor.memory"])
        builder = builder.require(executors)
    return builder.build


def _statuses(rows: Any) -> list[str]:
    return [row.status for row in rows]


def _run_partition(sc: Any, rdd: Any, partition: int) -> str:
    """The status row of one partition's task. Straight to the JVM when this pyspark allows: ``sc.runJob`` would
    add a second Python worker to every task (about 80 ms a piece), only to read the status row."""
    try:
        from pyspark.util import _load_from_socket
    except ImportError:
        return str(sc.runJob(rdd, _statuses, partitions=[partition])[0])
    sock = sc._jvm.PythonRDD.runJob(sc._jsc.sc(), rdd._jrdd, [partition])
    with _load_from_socket(sock, rdd._jrdd_deserializer) as stream:
        return str(next(iter(stream)).status)
