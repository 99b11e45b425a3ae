"""Spark jobs as the backend runs them: lanes on long-lived threads, readable errors, slots kept ranks hold.

Shared by the rank launcher (``spark``) and the data plane (``spark_data``); no pyspark import here.
"""
from __future__ import annotations

import collections
import itertools
import queue
import re
import threading
from collections.abc import Callable

__all__ = ["submit_job", "error_summary", "held_slots", "hold", "release", "explain_worker_python"]

_held: dict[str, int] = {}  # kept sets' run ids -> the task slots their running job holds


def held_slots() -> int:
    """Task slots held by kept ranks (their barrier job runs for as long as they are kept)."""
    return sum(_held.values())


def hold(run_id: str, slots: int) -> None:
    _held[run_id] = slots


def release(run_id: str) -> None:
    _held.pop(run_id, None)


class _Lanes:
    """Jobs by lane: a lane's jobs run one after another, lanes side by side, on long-lived threads that are reused
    (one JVM thread each, no churn). Runs at once each have lanes of their own, so none waits for another's job."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, collections.deque[Callable[[], None]]] = {}  # lanes with a job running: the next
        self._idle: list[_Worker] = []
        self._numbers = itertools.count()

    def submit(self, job: Callable[[], None], lane: str) -> None:
        with self._lock:
            if lane in self._waiting:
                self._waiting[lane].append(job)  # its worker takes it when the lane's job before it ends
                return
            self._waiting[lane] = collections.deque()
            worker = self._idle.pop() if self._idle else None
        (worker or _Worker(self, next(self._numbers))).give(lane, job)

    def next_job(self, worker: _Worker, lane: str) -> Callable[[], None] | None:
        """The lane's next job for the worker that ran its last one; None (the worker is idle) when there is none."""
        with self._lock:
            waiting = self._waiting[lane]
            if waiting:
                return waiting.popleft()
            del self._waiting[lane]
            self._idle.append(worker)
            return None

    def busy(self) -> int:
        """Lanes with a job running."""
        with self._lock:
            return len(self._waiting)


class _Worker:
    def __init__(self, lanes: _Lanes, number: int) -> None:
        self._lanes = lanes
        self._given: queue.SimpleQueue[tuple[str, Callable[[], None]]] = queue.SimpleQueue()
        threading.Thread(target=self._loop, name=f"jtd-spark-{number}", daemon=True).start()

    def give(self, lane: str, job: Callable[[], None]) -> None:
        self._given.put((lane, job))

    def _loop(self) -> None:
        while True:
            lane, job = self._given.get()
            next_job: Callable[[], None] | None = job
            while next_job is not None:
                next_job()
                next_job = self._lanes.next_job(self, lane)


_lanes = _Lanes()


def submit_job(job: Callable[[], None], lane: str) -> None:
    """Run ``job`` on a long-lived thread: jobs of one lane run one after another, other lanes' beside them."""
    _lanes.submit(job, lane)


def error_summary(exc: BaseException) -> str:
    """The useful lines of a Spark/py4j error, without the JVM stack."""
    keep = [ln for ln in str(exc).splitlines()
            if ln.strip() and not ln.lstrip().startswith(("at ", "...")) and "JVM stacktrace" not in ln]
    return "\n".join(keep[:30])[:4000] or type(exc).__name__


_CANNOT_RUN = re.compile(r"No module named '?(jupyter_torchdist|torch|cloudpickle)"
                         r"|EOFException occurred while reading the port number from (\S+)"
                         r"|Cannot run program \"([^\"]+)\"")
_WHERE = re.compile(r"\(TID \d+\) \(([^\s)]+) executor")


def explain_worker_python(error: str, python: str, hosts: list[str] | None = None) -> str:
    """A Spark job error that says the executors' Python cannot run our tasks, in the user's words (with what to
    set); any other error as it is. Spark's own text names the daemon's port or an executor's log, not the cause."""
    m = _CANNOT_RUN.search(error)
    if m is None:
        return error
    where = _WHERE.search(error)  # a barrier stage's failure names no task host: then every executor's hosts
    host = f" on {where[1]}" if where else f" on the executors at {', '.join(hosts)}" if hosts else ""
    what = (f"could not import {m[1]}" if m[1] else f"could not find the Python program {m[3]}" if m[3]
            else f"could not start {m[2].rstrip('.:,')} (most likely jupyter_torchdist is not installed for it)")
    return (f"the executors' Python ({python}{host}) {what}: install torch and jupyter-torchdist (the kernel's "
            "versions) for that Python, or point the executors at a Python that has them: PYSPARK_PYTHON in the "
            "kernel's environment before the session is created, or spark.pyspark.python on the session "
            "(spark.executorEnv.PYTHONPATH for a source checkout).\n" + error)
