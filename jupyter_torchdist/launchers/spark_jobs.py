"""Spark jobs as the backend runs them: one long-lived thread per lane, readable errors, slots kept ranks hold.

Shared by the rank launcher (``spark``) and the data plane (``spark_data``); no pyspark import here.
"""
from __future__ import annotations

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


class _Submitter:
    """Runs Spark jobs one after another on one long-lived thread (one JVM thread each, no churn)."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        threading.Thread(target=self._loop, name=f"jtd-spark-{name}", daemon=True).start()

    def _loop(self) -> None:
        while True:
            self._jobs.get()()

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)


_submitters: dict[str, _Submitter] = {}
_submitters_lock = threading.Lock()


def submit_job(job: Callable[[], None], lane: str = "runs") -> None:
    """Run ``job`` on the long-lived thread of ``lane``: jobs of one lane run one after another."""
    with _submitters_lock:
        submitter = _submitters.get(lane) or _submitters.setdefault(lane, _Submitter(lane))
    submitter.submit(job)


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
