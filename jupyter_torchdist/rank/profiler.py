"""``--profile``: ``torch.profiler`` on this rank for a window of steps, then one PROFILE message to the kernel.

The window is counted in the step numbers the cell gives ``report(step=...)`` (in calls when it gives none): the
report of step START-1 ends the step before the window, so profiling starts there, and the report of step STOP-1
ends it (``--profile 5:10`` profiles steps 5 to 9). Alone, ``--profile`` profiles three steps from the second
report on, past the first step's warm-up. The profiler starts one step before the window where it can (the report
of step START-2), in torch's warm-up state: its own start (about a second in a fresh process) and the ranks drifting
apart meanwhile fall in that step, which is not kept, so the window's first all-reduce is not charged with them.
Outside the window and that step nothing runs: no profiler, no hook beyond a counter.
The trace is exported as ``torch.profiler`` writes it (Chrome trace JSON, what TensorBoard's profiler and Perfetto
open), summarised here (``core.profile_summary``) and sent gzipped; the kernel writes it under the run's folder.
"""
from __future__ import annotations

import contextlib
import gzip
import json
import os
import tempfile
from collections.abc import Callable
from typing import Any, Final

from ..core import contract as C
from ..core.contract import ProfileShares
from ..core.profile_summary import shares_of
from ..core.track_options import AUTO_WINDOW

__all__ = ["StepProfiler", "input_mark"]

AUTO_FROM: Final = 2        # --profile alone: start after this many reports ...
AUTO_STEPS: Final = 3       # ... and profile this many steps
MAX_TRACE_BYTES: Final = 64 << 20   # a larger gzipped trace stays on the rank's host (the note says where)


class _Window:
    open = False   # a window is being profiled on this rank now


def input_mark() -> Any:
    """Around a wait for data (``batches()``): marked in the trace while a window is open, counted as input;
    nothing at all otherwise."""
    if not _Window.open:
        return contextlib.nullcontext()
    from torch.profiler import record_function

    return record_function("jupyter_torchdist.batches")


class StepProfiler:
    """Counts reports; profiles the window; sends what it saw once."""

    def __init__(self, window: tuple[int, int], gpu: bool, send: Callable[[C.ProfileMsg], None],
                 max_bytes: int = MAX_TRACE_BYTES) -> None:
        self.max_bytes = min(max_bytes, MAX_TRACE_BYTES)   # the channel's frame limit follows --max-value-mb
        self.auto = window == AUTO_WINDOW
        self.start, self.stop = window
        self.gpu, self.send = gpu, send
        self.calls = 0
        self.steps = 0
        self.first = self.last = 0
        self.prof: Any = None
        self.recording = False   # past the warm-up step: the window's steps are being kept
        self._action: Any = None   # what the schedule answers torch.profiler (warm-up, then record)
        self.done = False

    def begin_cell(self) -> None:
        """A window from step 0 starts with the cell's code; one from step 1 warms up on step 0."""
        if not self.auto and self.start == 0:
            self._begin(0)
        elif not self.auto and self.start == 1:
            self._warm_up()

    def on_report(self, step: int | None) -> None:
        if self.done:
            return
        n = step if isinstance(step, int) and not isinstance(step, bool) else self.calls
        self.calls += 1
        if not self.recording:
            if (self.calls == AUTO_FROM) if self.auto else (n >= self.start - 1):
                self._begin(n + 1)
            elif self.prof is None and ((self.calls == AUTO_FROM - 1) if self.auto else (n >= self.start - 2)):
                self._warm_up()
            return
        self.steps, self.last = self.steps + 1, n
        self.prof.step()
        if (self.steps >= AUTO_STEPS) if self.auto else (n >= self.stop - 1):
            self._end(None)

    def close(self) -> None:
        """The cell ended: a window still open is closed with what it has; one never opened is said so."""
        if self.done:
            return
        if self.recording:
            self._end(f"the cell ended at step {self.last} before the window's end")
        else:
            self._drop()
            self.done = True
            want = "a few steps" if self.auto else f"step {self.start}"
            self.send({"t": C.PROFILE, "first": 0, "last": 0, "trace": None, "shares": _nothing(),
                       "note": f"nothing profiled: the cell ended after {self.calls} report() calls, before {want}"})

    def _warm_up(self) -> None:
        """Start the profiler a step early, in torch's warm-up state (nothing kept): its own start costs there."""
        from torch.profiler import ProfilerAction

        self._open(ProfilerAction.WARMUP)

    def _begin(self, first: int) -> None:
        from torch.profiler import ProfilerAction

        if self.prof is None:
            if not self._open(ProfilerAction.RECORD):   # no step before the window was seen: record from here
                return
        else:
            self._action = ProfilerAction.RECORD
            self.prof.step()   # warm-up -> record: the window's first step begins (ProfilerStep#1)
        self.recording = True
        self.first = self.last = first

    def _open(self, action: Any) -> bool:
        """Start torch.profiler; False (and the profile says why) when it cannot: report() never raises for it."""
        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if self.gpu and torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        # a schedule of ours (warm-up, then record until the window ends): each step is marked ProfilerStep#N (the
        # step view of TensorBoard's profiler)
        self._action = action
        try:
            self.prof = profile(activities=activities, schedule=lambda _: self._action)
            self.prof.start()
        except Exception as exc:
            self.prof, self.done = None, True
            self._failed(exc)
            return False
        _Window.open = True
        return True

    def _failed(self, exc: BaseException) -> None:
        self.send({"t": C.PROFILE, "first": self.first, "last": self.last, "trace": None, "shares": _nothing(),
                   "note": f"the profiler failed: {type(exc).__name__}: {exc}"})

    def _drop(self) -> None:
        """A warm-up whose window never came: stop the profiler, keep nothing."""
        _Window.open = False
        prof, self.prof = self.prof, None
        if prof is not None:
            try:
                prof.stop()
            except Exception:
                pass

    def _end(self, note: str | None) -> None:
        self.done, self.recording = True, False
        _Window.open = False
        prof, self.prof = self.prof, None
        try:
            prof.stop()
            trace = _exported(prof)
            shares = shares_of(json.loads(trace).get("traceEvents", []), max(1, self.steps))
            packed = gzip.compress(trace, compresslevel=5)
        except Exception as exc:  # the profiler's failure is the profile's, never the cell's
            self._failed(exc)
            return
        sent: bytes | None = packed
        if len(packed) > self.max_bytes:
            sent, note = None, (f"the trace ({len(packed) / 1e6:.0f} MB gzipped) is too large to send; profile fewer "
                                "steps")
        self.send({"t": C.PROFILE, "first": self.first, "last": self.last, "shares": shares, "trace": sent,
                   "note": note})


def _nothing() -> ProfileShares:
    """The shares of a profile that holds no steps."""
    return {"span_s": 0.0, "steps": 0, "input": 0.0, "compute": 0.0, "comm": 0.0, "other": 0.0}


def _exported(prof: Any) -> bytes:
    fd, path = tempfile.mkstemp(suffix=".pt.trace.json", prefix="jtd-profile-")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path, "rb") as f:
            return f.read()
    finally:
        os.remove(path)
