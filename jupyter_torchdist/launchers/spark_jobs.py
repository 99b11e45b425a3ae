"""Spark jobs as the backend runs them: one long-lived thread per lane, readable errors, slots kept ranks hold.

Shared by the rank launcher (``spark``) and the data plane (``spark_data``); no pyspark import here.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable

__all__ = ["submit_job", "error_summary", "held_slots", "hold", "release"]

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
