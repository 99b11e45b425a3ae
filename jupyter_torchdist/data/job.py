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

import functools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from ..core import contract as C
from ..core.contract import Inbound
from ..launchers.base import DataPlane
from .plan import EpochPlan, Piece, plan_epoch, resume_plan
from .producer import PIECE_PROPERTY, STATUS_SCHEMA, ProducerSpec, producer

__all__ = ["DataJob", "JobSetup", "ATTEMPTS"]

ATTEMPTS: Final = 3
_counts: dict[tuple[int, tuple[str, ...] | None, int | None], tuple[Any, list[int]]] = {}
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
    plane: DataPlane        # where the data tasks run (the DataFrame's session), and how they are submitted
    pipeline: bool = False  # free task slots for two tasks per worker: each starts its next piece's task early
    taken: int = 0          # a restart resuming the epoch: the batches every rank already had
    lanes: str = "data"     # the run's own lane names start so (runs at once never wait for each other's lanes)


def _count_rows(batches: Any) -> Any:
    """mapInArrow: this partition's (index, rows)."""
    import pyarrow as pa
    from pyspark import TaskContext

    rows = sum(batch.num_rows for batch in batches)
    ctx = TaskContext.get()
    yield pa.RecordBatch.from_pydict({"p": [ctx.partitionId() if ctx else -1], "n": [rows]},
                                     schema=pa.schema([("p", pa.int64()), ("n", pa.int64())]))


def _counted(plane: DataPlane, df: Any, source: Any, columns: tuple[str, ...] | None, parts: int | None) -> list[int]:
    """Rows per partition of ``source``, once per DataFrame, column set and partitioning."""
    key = (id(df), columns, parts)
    with _counts_lock:
        cached = _counts.get(key)
        if cached is not None and cached[0] is df:
            return cached[1]
    counts = plane.count_rows(source, _count_rows)
    with _counts_lock:
        _counts[key] = (df, counts)
    return counts


def _source(plane: DataPlane, df: Any, columns: tuple[str, ...] | None, workers: int) -> tuple[Any, list[int]]:
    """What the tasks read, and its rows per partition: the chosen columns, and no more than 4 partitions per
    worker (a job per piece costs a Spark round trip, so thousands of tiny partitions are merged first)."""
    source = df.select(*columns) if columns else df
    parts = plane.partitions(source)  # None where the session cannot tell without running a job (Connect)
    if parts is not None and parts > 8 * workers:
        source, parts = source.coalesce(4 * workers), 4 * workers
    counts = _counted(plane, df, source, columns, parts)
    if parts is None and len(counts) > 8 * workers:
        source = source.coalesce(4 * workers)
        counts = _counted(plane, df, source, columns, 4 * workers)
    return source, counts


def _piece_json(piece: Piece, ahead: bool = False) -> dict[str, Any]:
    fragments = [[f.rank, f.step, f.index, f.of, f.rows] for f in piece.fragments]
    return {"id": piece.id, "partition": piece.partition, "lo": piece.lo, "hi": piece.hi, "fragments": fragments,
            "skip": piece.skip, "ahead": ahead}


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
        self._run: Callable[[dict[str, Any]], str] | None = None  # one piece's Spark job -> its status row

    def start(self) -> EpochPlan:
        s, a = self.setup, self.setup.args
        s.plane.begin(s.group, "jupyter-torchdist data: counting rows")  # cancel() stops it
        try:
            return self._start(s, a)
        finally:
            s.plane.end(s.group)

    def _start(self, s: JobSetup, a: dict[str, Any]) -> EpochPlan:
        source, counts = _source(s.plane, s.df, a["columns"], s.workers)
        plan = resume_plan(plan_epoch(counts, s.world, a["batch_size"], lanes=s.workers, shuffle=a["shuffle"],
                                      seed=a["seed"], epoch=a["epoch"], drop_last=a["drop_last"]), s.taken)
        self._run = s.plane.piece_runner(source, functools.partial(producer, s.spec), STATUS_SCHEMA, PIECE_PROPERTY)
        streams = 2 if s.pipeline else 1
        self._lanes, self._left = len(plan.lanes), {k: streams for k in range(len(plan.lanes))}
        if not plan.lanes:
            self._ended.set()
        for k, lane in enumerate(plan.lanes):
            for i in range(streams):  # pipelined: pieces 0, 2, 4... on one thread, 1, 3, 5... on another
                lead = lane[0].id if streams > 1 else None  # pipelined: every later piece starts ahead
                s.plane.submit(functools.partial(self._stream, k, lane[i::streams], lead), lane=f"{s.lanes}-{k}-{i}")
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

    def _run_piece(self, lane: int, piece: Piece, ahead: bool) -> dict[str, Any]:
        """One Spark job for one piece, retried when its task is lost; its status. ``ahead``: the task starts
        while the lane's previous piece still sends (pipelined), so its first transforms take only spare CPU."""
        last = ""
        assert self._run is not None
        for _ in range(ATTEMPTS):
            if self.cancelled.is_set():
                return {"cancelled": True}
            self._status(lane, running=1)
            try:
                return dict(json.loads(self._run(_piece_json(piece, ahead))))
            except Exception as exc:
                last = self.setup.plane.describe(exc)
            finally:
                self._status(lane, running=-1)
        return {"error": f"the data task for partition {piece.partition} failed {ATTEMPTS} times; the last "
                         f"error: {last.splitlines()[0] if last else 'unknown'}", "traceback": last, "user": False}

    def _stream(self, lane: int, pieces: tuple[Piece, ...], lead: int | None = None) -> None:
        """Run ``pieces`` one after another (all of a lane's, or every other one when pipelined, where every piece
        but the lane's first, ``lead``, starts ahead)."""
        plane = self.setup.plane
        try:
            plane.begin(self.setup.group, "jupyter-torchdist data")
            for piece in pieces:
                status = self._run_piece(lane, piece, ahead=lead is not None and piece.id != lead)
                if status.get("cancelled") or self.cancelled.is_set():
                    return
                if "error" in status:
                    self.on_error(str(status["error"]), str(status.get("traceback", "")))
                    self.cancel()
                    return
                self._status(lane, rows=int(status.get("rows", 0)))
        finally:
            plane.end(self.setup.group)
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
        self.setup.plane.cancel(self.setup.group)

    def wait(self, timeout: float) -> bool:
        """True once every lane has ended (its last task finished or was cancelled)."""
        return self._ended.wait(timeout)
