"""Runs on record: tracking (``--track``: MLflow, TensorBoard, W&B, the trackers of ``core/trackers.py``) and
``--profile``'s traces, from the kernel.

``recorder_for`` gives a run its recorder (``recorder.py``) when it is tracked or profiled, after the environment
was checked (``check_environment``: before any rank starts); ``flush`` waits for the records to
reach their trackers.
"""
from __future__ import annotations

from typing import Any

from ..core.errors import OptionsError
from ..core.options import RunOptions
from ..core.track_options import check_environment as check_installed, default_trackers
from .sinks import imported, prefetch, sink_class
from .recorder import RunRecorder, SweepRecorder
from .shipper import flush, tracking

__all__ = ["recorder_for", "sweep_recorder", "flush", "tracking", "RunRecorder", "SweepRecorder", "check_environment",
           "prefetch_defaults"]


def check_environment(options: RunOptions) -> None:
    """Before any rank starts: the trackers are installed, the log folder takes files, the journal's bound is a size,
    and MLflow takes the store the notebook points it at (a scheme it has no store for, or a local file store it
    refuses, is said now, not after the run)."""
    check_installed(options)
    for name in options.track:
        imported(name)
        sink_class(name).preflight(options)


def prefetch_defaults() -> None:
    """The default trackers' packages imported in the background (``prefetch``): every run without ``--track``
    records to them. A setting naming no tracker is left for the first run to refuse, with the names it takes."""
    try:
        prefetch(default_trackers())
    except OptionsError:
        pass


def recorder_for(run: Any, work: Any, options: RunOptions, parent: SweepRecorder | None = None) -> RunRecorder | None:
    """The run's recorder, or None when it is neither tracked nor profiled."""
    if not options.track and options.profile is None:
        return None
    return RunRecorder(run, work, options, parent)


def sweep_recorder(options: RunOptions, title: str) -> SweepRecorder | None:
    """The sweep's parent record, begun (its environment was checked with the sweep's options)."""
    if not options.track and options.profile is None:
        return None
    recorder = SweepRecorder(options, title)
    recorder.begin()
    return recorder
