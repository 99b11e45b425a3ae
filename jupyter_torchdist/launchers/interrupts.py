"""The kernel's interrupt stops the cell that is executing, never a run of ours going on beside it.

A SparkContext made on the notebook's main thread (the user's own session) installs pyspark's SIGINT handler,
which cancels *every* job of the application: an interrupt of any cell (a DataFrame query, a ``time.sleep``) would
also cancel the Spark jobs of background runs, of a sweep and of kept ranks. ``guard_interrupts`` (called before
each cell, on the main thread) puts ours in its place: it cancels the application's other jobs, as pyspark's does,
and leaves ours (their job groups start with ``jupyter-torchdist``); a foreground run catches the interrupt itself
and stops only its own job. pyspark is never imported here: only a handler pyspark installed is replaced.
"""
from __future__ import annotations

import signal
import sys
import threading
from types import FrameType
from typing import Any, Final

__all__ = ["guard_interrupts", "OURS"]

OURS: Final = "jupyter-torchdist"  # the prefix of every job group our runs, kept ranks and data tasks use


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
        for job in sc.statusTracker().getActiveJobsIds():
            group = sc._jsc.sc().statusStore().job(job).jobGroup()
            if not (group.isDefined() and str(group.get()).startswith(OURS)):
                sc._jsc.sc().cancelJob(job)
                cancelled.append(int(job))
    except Exception:
        sc.cancelAllJobs()  # a Spark without these internals: as pyspark's own handler would
    return cancelled
