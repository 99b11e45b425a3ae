"""The live view where the widget's front end was not built (a checkout installed without Node).

It redraws the run report itself, in place, through the display system: the extension's renderer
where JupyterLab has it, the HTML fallback elsewhere. The same snapshot, budget and renderers as
the widget and the saved report, only fewer frames (the whole report is sent each time).
"""
from __future__ import annotations

import time
from typing import Any

from IPython.display import display

from .report import RunReport
from .trim import LIVE, REPORT

__all__ = ["DisplayView"]

FRAME_S = 0.5


class DisplayView:
    """A ``RunView`` that updates one display with the live-trimmed report, twice a second at most."""

    log_tail = REPORT.log_lines
    focus: frozenset[int] = frozenset()

    def __init__(self) -> None:
        self._handle: Any = None
        self._last = 0.0

    def start(self, snapshot: dict[str, Any]) -> None:
        self._handle = display(RunReport(snapshot, LIVE), display_id=True)  # type: ignore[no-untyped-call]
        self._last = time.monotonic()

    def update(self, snapshot: dict[str, Any]) -> None:
        now = time.monotonic()
        if self._handle is not None and now - self._last >= FRAME_S:
            self._handle.update(RunReport(snapshot, LIVE))
            self._last = now

    def finish(self, snapshot: dict[str, Any]) -> None:
        if self._handle is not None:
            self._handle.update(RunReport(snapshot))
        else:
            display(RunReport(snapshot))  # type: ignore[no-untyped-call]
