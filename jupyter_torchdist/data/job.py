"""Runs in the kernel: one epoch's data job on the DataFrame's own SparkSession.

Count the rows of each partition (once per DataFrame and column set: counting needs no transform, and
reads no data column Spark can skip), plan the epoch (``plan``), then run one **lane** per data
worker: a thread that submits its pieces one Spark job at a time (``producer`` runs in each task). One
task per lane at a time is what makes the epoch deadlock-free whatever order Spark runs tasks in: a lane's
pieces send in increasing step order, so the oldest undelivered batch always has a task running or next.
When the session has free slots for two tasks per lane, each lane keeps its next piece's task started
beside the current one (two threads, alternate pieces): the next task's start-up (a Spark job costs about
0.2 s) and its first transform overlap the current piece instead of stalling the lane between pieces.

A task that fails (its Python worker died, its executor went away) is run again, up to ``ATTEMPTS``
times; the ranks drop the fragments they already have, so no row arrives twice. A transform's exception
is not retried: it comes back as the task's status and fails the epoch at once, naming the transform.
"""
from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from .. import contract as C
from ..contract import Inbound
from .plan import EpochPlan, Piece, plan_epoch
from .producer import PIECE_PROPERTY, STATUS_SCHEMA, ProducerSpec, producer

__all__ = ["DataJob", "JobSetup", "default_workers", "data_slots", "ATTEMPTS"]

ATTEMPTS: Final = 3
_counts: dict[tuple[int, tuple[str, ...] | None, int], tuple[Any, list[int]]] = {}
_counts_lock = threading.Lock()


@dataclass(frozen=True)
class JobSetup:
    """The epoch as the ranks asked for it (rank 0's request; every rank asked alike)."""

    df: Any
    world: int
    workers: int
    args: dict[str, Any]
    spec: ProducerSpec
    group: str
    pipeline: bool = False  # free task slots for two tasks per worker: each starts its next piece's task early


def _local_cores(master: str) -> int | None:
    if not master.startswith("local"):
        return None
    inside = master[master.find("[") + 1:master.find("]")] if "[" in master else "1"
    first = inside.split(",")[0].strip()
    cores = os.cpu_count() or 1
    return cores if first == "*" else min(cores, int(first)) if first.isdigit() else cores


def default_workers(session: Any, ranks: int, free: int) -> int:
    """The session's task slots beyond the ranks' (``free``); on a local master, its cores beyond the ranks'.
    At least 1."""
    cores = _local_cores(session.sparkContext.master)
    return max(1, (cores - ranks) if cores is not None else free)


def _source(df: Any, columns: tuple[str, ...] | None, workers: int) -> Any:
    """What the tasks read: the chosen columns, and no more than 4 partitions per worker (a job per piece
    costs a Spark round trip, so thousands of tiny partitions are merged first)."""
    source = df.select(*columns) if columns else df
    parts = source.rdd.getNumPartitions()
    return source.coalesce(4 * workers) if parts > 8 * workers else source


def _count_rows(batches: Any) -> Any:
    """mapInArrow: this partition's (index, rows)."""
    import pyarrow as pa
    from pyspark import TaskContext

    rows = sum(batch.num_rows for batch in batches)
    ctx = TaskContext.get()
    yield pa.RecordBatch.from_pydict({"p": [ctx.partitionId() if ctx else -1], "n": [rows]},
                                     schema=pa.schema([("p", pa.int64()), ("n", pa.int64())]))


def _partition_counts(df: Any, source: Any, key: tuple[int, tuple[str, ...] | None, int], conf: dict[str, str]) \
        -> list[int]:
    """Rows per partition of ``source``, once per DataFrame and column set. Only a literal is selected, so
    Spark reads no data column it need not; the count runs with the data job's own task profile."""
    from pyspark.sql import functions as F

    with _counts_lock:
        cached = _counts.get(key)
        if cached is not None and cached[0] is df:
            return cached[1]
    counted = source.select(F.lit(1).alias("one")).mapInArrow(_count_rows, "p long, n long")
    counts = [0] * key[2]
    for row in _resources(counted.rdd, conf).collect():
        counts[int(row["p"])] = int(row["n"])
    with _counts_lock:
        _counts[key] = (df, counts)
    return counts


def data_slots(session: Any) -> int:
    """Task slots a data task can use: with GPU scheduling, every core of every executor (data tasks ask for
    no GPU); otherwise the session's task slots."""
    from ..launchers.spark_session import conf_of, slots_available

    sc = session.sparkContext
    conf = conf_of(sc)
    if not conf.get("spark.task.resource.gpu.amount") or sc.master.startswith("local"):
        return slots_available(session)
    executors = max(0, int(sc._jsc.sc().getExecutorMemoryStatus().size()) - 1)  # less the driver
    cores = int(conf.get("spark.executor.cores", "1") or 1) // max(1, int(conf.get("spark.task.cpus", "1") or 1))
    return executors * cores


def _resources(rdd: Any, conf: dict[str, str]) -> Any:
    """With GPU scheduling, ranks take the GPU task slots; data tasks ask for one CPU and no GPU, so they run
    in the executors' other slots (a stage-level TaskResourceProfile)."""
    if not conf.get("spark.task.resource.gpu.amount"):
        return rdd
    from pyspark.resource import ResourceProfileBuilder, TaskResourceRequests

    cpus = int(conf.get("spark.task.cpus", "1") or 1)
    profile = ResourceProfileBuilder().require(TaskResourceRequests().cpus(cpus)).build
    return rdd.withResources(profile)


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


class DataJob:
    """The epoch's Spark work: ``start`` returns the plan once the lanes are submitted."""

    def __init__(self, setup: JobSetup, inbox: Any, on_error: Callable[[str, str], None]) -> None:
        self.setup, self.inbox, self.on_error = setup, inbox, on_error
        self.cancelled = threading.Event()
        self._lock = threading.Lock()
        self._lanes = 0
        self._left: dict[int, int] = {}  # per lane: its task streams still running (2 when pipelined)
        self._running: dict[int, int] = {}  # per lane: its tasks running now (up to 2 when pipelined)
        self._rows = 0
        self._ended = threading.Event()
        self._rdd: Any = None

    def start(self) -> EpochPlan:
        from ..launchers.spark import submit_job
        from ..launchers.spark_session import conf_of

        s, a = self.setup, self.setup.args
        sc = s.df.sparkSession.sparkContext
        sc.setJobGroup(s.group, "jupyter-torchdist data: counting rows", interruptOnCancel=True)  # cancel() stops it
        try:
            return self._start(s, a, submit_job, conf_of(sc))
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)

    def _start(self, s: JobSetup, a: dict[str, Any], submit_job: Any, conf: dict[str, str]) -> EpochPlan:
        source = _source(s.df, a["columns"], s.workers)
        counts = _partition_counts(s.df, source, (id(s.df), a["columns"], source.rdd.getNumPartitions()), conf)
        plan = plan_epoch(counts, s.world, a["batch_size"], lanes=s.workers, shuffle=a["shuffle"], seed=a["seed"],
                          epoch=a["epoch"], drop_last=a["drop_last"])
        mapped = source.mapInArrow(producer(s.spec), STATUS_SCHEMA)
        self._rdd = _resources(mapped.rdd, conf)
        streams = 2 if s.pipeline else 1
        self._lanes, self._left = len(plan.lanes), {k: streams for k in range(len(plan.lanes))}
        if not plan.lanes:
            self._ended.set()
        for k, lane in enumerate(plan.lanes):
            for i in range(streams):  # pipelined: pieces 0, 2, 4... on one thread, 1, 3, 5... on another
                submit_job(lambda k=k, part=lane[i::streams]: self._stream(k, part), lane=f"data-{k}-{i}")
        return plan

    # -- lanes -------------------------------------------------------------------------------------------
    def _status(self, lane: int, running: int = 0, rows: int = 0) -> None:
        with self._lock:
            self._running[lane] = self._running.get(lane, 0) + running
            self._rows += rows
            active = sum(1 for left in self._left.values() if left)
            msg: C.DataStatusMsg = {"t": C.DATA_STATUS, "workers": self._lanes, "active": active,
                   "running": sum(1 for n in self._running.values() if n), "rows": self._rows}
        self.inbox.put(Inbound(-1, C.BACKEND, msg))

    def _run_piece(self, sc: Any, lane: int, piece: Piece) -> dict[str, Any]:
        """One Spark job for one piece, retried when its task is lost; its status."""
        last = ""
        for _ in range(ATTEMPTS):
            if self.cancelled.is_set():
                return {"cancelled": True}
            fragments = [[f.rank, f.step, f.index, f.of, f.rows] for f in piece.fragments]
            sc.setLocalProperty(PIECE_PROPERTY, json.dumps({"id": piece.id, "partition": piece.partition,
                                                            "lo": piece.lo, "hi": piece.hi, "fragments": fragments}))
            self._status(lane, running=1)
            try:
                return dict(json.loads(_run_partition(sc, self._rdd, piece.partition)))
            except Exception as exc:
                from ..launchers.spark import error_summary

                last = error_summary(exc)
            finally:
                self._status(lane, running=-1)
        return {"error": f"the data task for partition {piece.partition} failed {ATTEMPTS} times; the last "
                         f"error: {last.splitlines()[0] if last else 'unknown'}", "traceback": last, "user": False}

    def _stream(self, lane: int, pieces: tuple[Piece, ...]) -> None:
        """Run ``pieces`` one after another (all of a lane's, or every other one when pipelined)."""
        sc = self.setup.df.sparkSession.sparkContext
        try:
            sc.setJobGroup(self.setup.group, "jupyter-torchdist data", interruptOnCancel=True)
            for piece in pieces:
                status = self._run_piece(sc, lane, piece)
                if status.get("cancelled") or self.cancelled.is_set():
                    return
                if "error" in status:
                    self.on_error(str(status["error"]), str(status.get("traceback", "")))
                    self.cancel()
                    return
                self._status(lane, rows=int(status.get("rows", 0)))
        finally:
            for key in (PIECE_PROPERTY, "spark.jobGroup.id"):
                sc.setLocalProperty(key, None)
            with self._lock:
                self._left[lane] -= 1
                done = not any(self._left.values())
            self._status(lane)
            if done:
                self._ended.set()

    def cancel(self) -> None:
        if self.cancelled.is_set():
            return
        self.cancelled.set()
        try:
            self.setup.df.sparkSession.sparkContext.cancelJobGroup(self.setup.group)
        except Exception:
            pass

    def wait(self, timeout: float) -> bool:
        """True once every lane has ended (its last task finished or was cancelled)."""
        return self._ended.wait(timeout)
