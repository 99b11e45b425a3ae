"""Runs in the kernel, one per run (or kept cell): answers the ranks' ``batches()`` requests.

Every rank asks for the same epoch (DATA_OPEN, the n-th request of the cell on each rank); once all have,
the epoch is planned and its data job started on a thread of its own (counting can take a while, and the
supervisor must keep moving messages), and each rank learns its steps (DATA_PLAN). What goes wrong (the
DataFrame is unknown, the ranks disagree, the transform raised) reaches every rank as DATA_ERROR, so the
training loops raise instead of waiting. When every rank has stopped reading an epoch, or the run ends,
its job is stopped: no data task outlives the run.
"""
from __future__ import annotations

import linecache
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Final

from ..core import contract as C
from ..core.contract import Inbound
from ..launchers import data_plane
from ..launchers.spark_jobs import error_summary
from .frame_handles import resolve

__all__ = ["DataService", "CLOSE_WAIT_S"]

CLOSE_WAIT_S: Final = 10.0


@dataclass
class _Epoch:
    seq: int
    opens: dict[int, dict[str, Any]] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    early: bool = False      # a rank stopped reading before the end (break, an exception)
    job: Any = None
    failed: bool = False


class SetupError(Exception):
    """The epoch cannot start; the message is for the user (every rank raises it)."""


def _same_request(opens: dict[int, dict[str, Any]]) -> None:
    first = opens[0]
    for rank, msg in sorted(opens.items()):
        if (msg.get("handle"), msg.get("args")) != (first.get("handle"), first.get("args")):
            raise SetupError(f"every rank must call batches() with the same DataFrame and arguments (like a "
                             f"DistributedSampler); rank 0 asked for {first.get('args')}, rank {rank} for "
                             f"{msg.get('args')}")


def _sources(opens: dict[int, dict[str, Any]]) -> tuple[tuple[str, str], ...]:
    """The transform's source lines, from the rank (a %%distribute cell) or this kernel (a notebook cell)."""
    out = {}
    for filename, text in opens[0].get("sources") or []:
        text = text or "".join(linecache.getlines(str(filename)))
        if filename and text:
            out[str(filename)] = str(text)
    return tuple(out.items())


class DataService:
    """The kernel's side of ``batches()`` for one run. ``handle`` is called on the supervisor's thread."""

    def __init__(self, server: Any, inbox: Any, *, world_size: int, workers: int | None, secret: bytes,
                 run_id: str, ranks_in_slots: int, loopback: bool = True) -> None:
        self.server, self.inbox, self.world = server, inbox, world_size
        self.workers, self.secret, self.run_id = workers, secret, run_id
        self.ranks_in_slots = ranks_in_slots  # the run's own unheld task slots (0 for --local and kept ranks)
        self.loopback = loopback              # the ranks listen on 127.0.0.1: data tasks must run on this host
        self._epochs: dict[int, _Epoch] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._closed = False

    # -- the supervisor's side ------------------------------------------------------------------------
    def handle(self, ev: Inbound) -> None:
        t, seq = ev.msg.get("t"), ev.msg.get("seq")
        if not isinstance(seq, int):
            return
        with self._lock:
            epoch = self._epochs.setdefault(seq, _Epoch(seq))
            if t == C.DATA_OPEN:
                epoch.opens[ev.rank] = dict(ev.msg)
                ready = len(epoch.opens) == self.world and epoch.job is None and not self._closed
            else:
                epoch.done.add(ev.rank)
                epoch.early = epoch.early or bool(ev.msg.get("early"))
                ready = False
            stop = len(epoch.done) == self.world and epoch.early
        if ready:
            thread = threading.Thread(target=self._start, args=(epoch,), name=f"jtd-data-{seq}", daemon=True)
            self._threads.append(thread)
            thread.start()
        if stop and epoch.job is not None:
            epoch.job.cancel()  # every rank stopped reading, some before the end: nothing more is needed

    def rank_ended(self, rank: int) -> None:
        """A rank ended its cell: epochs it never asked for cannot start; the ranks waiting on them are told."""
        with self._lock:
            stuck = [e for e in self._epochs.values() if e.job is None and e.opens and rank not in e.opens
                     and not e.failed]
        for epoch in stuck:
            self._fail(epoch, f"rank {rank} ended the cell without calling batches() (request {epoch.seq}): "
                              "every rank must call it the same number of times, like a DistributedSampler", "")

    # -- an epoch -------------------------------------------------------------------------------------
    def _setup(self, epoch: _Epoch) -> Any:
        from .job import JobSetup
        from .producer import ProducerSpec

        _same_request(epoch.opens)
        first = epoch.opens[0]
        df = _dataframe(str(first.get("handle")))
        plane = data_plane(df.sparkSession)
        if self.loopback and not plane.local:
            raise SetupError("these ranks run on the kernel's machine and listen on 127.0.0.1, but the DataFrame's "
                             "session is a cluster whose executors cannot reach them: run the ranks on the cluster "
                             "(drop --local)")
        args = dict(first["args"])
        args["columns"] = tuple(args["columns"]) if args.get("columns") else None
        resume = args.pop("resume", None) or {}  # a restart: the epoch's plan as it was, less what was read
        free = plane.free_slots(self.ranks_in_slots)
        if plane.grows:  # dynamic allocation: Spark asks the cluster for executors for the data tasks as they wait
            free = max(free, self.workers or self.world, int(resume.get("lanes") or 0))
        if resume:
            _check_resume(free, int(resume["lanes"]), plane.master)
            workers = int(resume["lanes"])
        else:
            _check_slots(free, self.workers, plane.master)
            workers = self.workers or min(free, plane.default_workers(self.world, free))
        spec = ProducerSpec(
            secret=self.secret, addresses=tuple(tuple(epoch.opens[r]["address"]) for r in range(self.world)),
            pins=tuple(epoch.opens[r].get("pin") for r in range(self.world)),
            feeds=tuple(int(epoch.opens[r]["feed"]) for r in range(self.world)),
            transform=first.get("transform"), transform_name=str(first.get("transform_name") or "transform"),
            shuffle=bool(args["shuffle"]), seed=int(args["seed"]), epoch=int(args["epoch"]),
            sources=_sources(epoch.opens))
        return JobSetup(df, self.world, workers, args, spec, f"jupyter-torchdist-data-{self.run_id}-{epoch.seq}",
                        plane=plane, pipeline=free >= 2 * workers, taken=int(resume.get("taken") or 0),
                        lanes=f"data-{self.run_id}")

    def _start(self, epoch: _Epoch) -> None:
        from .job import DataJob

        try:
            setup = self._setup(epoch)
            job = DataJob(setup, self.inbox, lambda text, tb: self._fail(epoch, text, tb))
            with self._lock:
                epoch.job = job
                closed = self._closed
            if closed:
                return
            plan = job.start()
        except SetupError as exc:
            self._fail(epoch, str(exc), "")
            return
        except Exception as exc:
            self._fail(epoch, f"the data job could not start: {error_summary(exc)}", "")
            return
        reply = {"t": C.DATA_PLAN, "seq": epoch.seq, "steps": plan.steps, "rows": plan.rows_used,
                 "left_out": plan.rows_left_out, "workers": len(plan.lanes), "lanes": setup.workers}
        for rank in range(self.world):
            self.server.send(rank, C.RANK, reply)
        if len(epoch.done) == self.world and epoch.early:
            job.cancel()

    def _fail(self, epoch: _Epoch, summary: str, traceback: str) -> None:
        with self._lock:
            if epoch.failed:
                return
            epoch.failed = True
        msg = {"t": C.DATA_ERROR, "seq": epoch.seq, "summary": summary, "traceback": traceback}
        for rank in range(self.world):
            self.server.send(rank, C.RANK, msg)
        if epoch.job is not None:
            epoch.job.cancel()

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """The run is over: stop every epoch's job and wait (up to ``wait_s``) until its tasks have ended."""
        with self._lock:
            self._closed = True
            epochs = list(self._epochs.values())
        deadline = time.monotonic() + wait_s
        for _ in range(2):  # before and after the epochs still being set up have made their jobs
            for epoch in epochs:
                if epoch.job is not None:
                    epoch.job.cancel()
            for thread in self._threads:
                thread.join(max(0.0, deadline - time.monotonic()))
        for epoch in epochs:
            if epoch.job is not None:
                epoch.job.wait(max(0.0, deadline - time.monotonic()))


def _dataframe(handle: str) -> Any:
    df = resolve(handle)
    if df is None:
        raise SetupError("batches() got a DataFrame handle this kernel does not know (from another kernel, or made "
                         "before a restart): use the DataFrame in the cell itself")
    return df


def _check_slots(free: int, asked: int | None, master: str) -> None:
    """Every data worker needs a task slot of its own at once (a worker waiting for a slot that a blocked
    worker holds would stall the epoch for good): refuse up front, saying what to change."""
    if free < 1:
        raise SetupError(f"the SparkSession ({master}) has no task slot left for a data worker beside the ranks: "
                         "give it more slots (more executors or cores; local[N] with a larger N) or run fewer ranks")
    if asked is not None and asked > free:
        raise SetupError(f"--data-workers {asked} needs {asked} free task slots beside the ranks, but the "
                         f"SparkSession ({master}) has {free}: ask for at most {free}, or give it more slots")


def _check_resume(free: int, lanes: int, master: str) -> None:
    """A restart resumes an epoch with its first plan, which needs as many data workers at once as it had."""
    if lanes > free:
        raise SetupError(f"this epoch resumes where the last commit left it, with the plan it had: {lanes} data "
                         f"workers at once, but the SparkSession ({master}) has {free} free task slots beside the "
                         "ranks now (a lost host took some): give it more slots, or start the run afresh")
