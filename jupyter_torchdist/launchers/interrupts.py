"""The kernel's interrupt stops the cell that is executing, never a run of ours going on beside it.

A SparkContext made on the notebook's main thread (the user's own session) installs pyspark's SIGINT handler,
which cancels *every* job of the application: an interrupt of any cell (a DataFrame query, a ``time.sleep``) would
also cancel the Spark jobs of background runs, of a sweep and of kept ranks. ``guard_interrupts`` (called before
each cell, on the main thread) puts ours in its place: it cancels the application's other jobs, as pyspark's does,
and leaves ours; a foreground run catches the interrupt itself and stops only its own job. Ours are the jobs of the
job groups ``our_jobs`` holds while they run (every group our runs, kept ranks and data tasks use starts with
``jupyter-torchdist``), found with Spark's public status tracker; when Spark cannot say which jobs are whose,
nothing is cancelled (the cell's Python still stops): never every job. pyspark is never imported here: only a
handler pyspark installed is replaced. A Spark Connect client interrupts only the operation the cell waits on.
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any, Final

__all__ = ["guard_interrupts", "OURS", "our_jobs", "claim", "unclaim", "cancel_others"]

OURS: Final = "jupyter-torchdist"  # the prefix of every job group our runs, kept ranks and data tasks use
_groups: dict[str, int] = {}        # our job groups with jobs running or about to run (a count per group)
_lock = threading.Lock()


def claim(group: str) -> None:
    """The jobs of ``group`` are ours from now (until ``unclaim``): an interrupt of another cell leaves them."""
    with _lock:
        _groups[group] = _groups.get(group, 0) + 1


def unclaim(group: str) -> None:
    with _lock:
        if _groups.get(group, 0) > 1:
            _groups[group] -= 1
        else:
            _groups.pop(group, None)


@contextlib.contextmanager
def our_jobs(group: str) -> Iterator[None]:
    """While inside, the jobs of ``group`` are ours."""
    claim(group)
    try:
        yield
    finally:
        unclaim(group)


def _is_pysparks(handler: Any) -> bool:
    return str(getattr(handler, "__module__", "")).startswith("pyspark") and \
        "signal_handler" in str(getattr(handler, "__qualname__", ""))


def guard_interrupts() -> bool:
    """Replace pyspark's SIGINT handler with ours, if it is installed (main thread only). True when replaced."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if not _is_pysparks(signal.getsignal(signal.SIGINT)):
        return False
    signal.signal(signal.SIGINT, _on_interrupt)
    return True


def _on_interrupt(signum: int, frame: FrameType | None) -> None:
    try:
        cancel_others()
    finally:
        raise KeyboardInterrupt()


def cancel_others() -> list[int]:
    """Cancel the running Spark jobs that are not ours; returns their ids."""
    context = getattr(sys.modules.get("pyspark"), "SparkContext", None)
    sc = getattr(context, "_active_spark_context", None)
    if sc is None:
        return []
    cancelled = []
    try:
        tracker = sc.statusTracker()
        with _lock:
            groups = list(_groups)
        ours = {int(job) for group in groups for job in tracker.getJobIdsForGroup(group)}
        for job in tracker.getActiveJobsIds():
            if int(job) not in ours:
                sc._jsc.sc().cancelJob(int(job))
                cancelled.append(int(job))
    except Exception:
        pass  # Spark cannot say whose jobs run: cancel none rather than every one
    return cancelled
