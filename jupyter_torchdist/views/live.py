"""The live view: an anywidget whose front end is the run-report renderer (``labextension/src``).

Live and saved look the same because they are drawn by the same TypeScript code: the widget's
ES module (``jupyter_torchdist/static/widget.js``, built from ``labextension/src/widget.ts``) draws
the synced ``snapshot``, and at the end of the run the widget's output is replaced, in place, by
the ``RunReport`` that the JupyterLab extension draws without a kernel.

The kernel sends the whole snapshot up to ten times a second, so ``live_snapshot`` keeps it small
whatever the number of ranks: log tails and loss curves share fixed budgets.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anywidget
import traitlets
from IPython.display import display

from ..run_report import LOG_TAIL_LINES, RunReport, trim_snapshot

__all__ = ["LiveView", "RunWidget", "live_available", "live_snapshot", "ESM", "CSS"]

STATIC = Path(__file__).resolve().parent.parent / "static"
ESM = STATIC / "widget.js"   # built by `jlpm build:prod` in labextension/ (git-ignored)
CSS = STATIC / "widget.css"

LIVE_LOG_LINES = 40         # log lines per rank in one update (the pane shows 12, "show all" the rest)
LIVE_LOG_CHARS = 48_000     # log characters per update, shared by all ranks (failed ranks get 4 shares)
LIVE_LOG_MIN_CHARS = 600    # a rank's share never drops below this
LIVE_CURVE_POINTS = 1_600   # loss-curve points per update, shared by the ranks that have a curve
LIVE_CURVE_MIN = 24         # ... never fewer than this per rank
LIVE_CURVE_MAX = 200
LIVE_LAST_LINE_CHARS = 160  # the row's "last output" cell shows less; the log pane has the whole line


def live_available() -> bool:
    """Whether the widget's front end was built (a checkout without Node has none)."""
    return ESM.is_file() and CSS.is_file()


def _tail(lines: Any, max_lines: int, budget: int) -> Any:
    """The last lines within ``max_lines`` and ``budget`` characters (at least one line)."""
    if not isinstance(lines, Sequence) or isinstance(lines, str):
        return lines  # not a log: trim_snapshot drops it
    out = []
    used = 0
    for entry in reversed(lines[-max_lines:]):
        size = len(str(entry[1] if isinstance(entry, Sequence) and len(entry) > 1 else entry))
        if out and used + size > budget:
            break
        out.append(entry)
        used += size
    out.reverse()
    return out


def _thin(points: Any, limit: int) -> Any:
    """At most ``limit`` points evenly picked, the last one kept (it is the newest value)."""
    if not isinstance(points, Sequence) or len(points) <= limit:
        return points
    stride = len(points) / limit
    return [points[math.floor(i * stride)] for i in range(limit - 1)] + [points[-1]]


def live_snapshot(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """``trim_snapshot`` with tighter budgets for live updates: at most about 110 KB for 64 ranks.

    The logs and curves are cut to the live budgets first, so the trim (bounds, JSON safety) only
    walks what will be sent: this runs up to ten times a second.
    """
    ranks = [r for r in (snapshot.get("ranks") or []) if isinstance(r, Mapping)]
    shares = sum(4 if r.get("state") == "failed" else 1 for r in ranks) or 1
    curves = sum(1 for r in ranks if r.get("loss_history")) or 1
    points = min(LIVE_CURVE_MAX, max(LIVE_CURVE_MIN, LIVE_CURVE_POINTS // curves))
    light = []
    for r in ranks:
        budget = max(LIVE_LOG_MIN_CHARS, LIVE_LOG_CHARS * (4 if r.get("state") == "failed" else 1) // shares)
        last = r.get("last_line")
        light.append({**r, "log_tail": _tail(r.get("log_tail"), LIVE_LOG_LINES, budget),
                      "loss_history": _thin(r.get("loss_history"), points),
                      "last_line": last[:LIVE_LAST_LINE_CHARS] if isinstance(last, str) else last})
    return trim_snapshot({**snapshot, "ranks": light})


class RunWidget(anywidget.AnyWidget):
    """Syncs one trimmed snapshot; the front end draws it and handles every interaction itself."""

    snapshot = traitlets.Dict().tag(sync=True)
    # Declared traits, filled in __init__: anywidget would only sync a CSS given as a class attribute.
    _esm = traitlets.Unicode().tag(sync=True)
    _css = traitlets.Unicode().tag(sync=True)

    def __init__(self, snapshot: dict[str, Any]) -> None:
        # Read at each run, not at import: the module imports without a built front end,
        # and a rebuilt one is picked up without restarting the kernel.
        super().__init__(_esm=ESM.read_text(encoding="utf-8"), _css=CSS.read_text(encoding="utf-8"),
                         snapshot=snapshot)


class LiveView:
    """The ``RunView`` of Jupyter front ends with anywidget: the widget while it runs, the report after."""

    log_tail = LOG_TAIL_LINES  # as many lines as the saved report keeps

    def __init__(self) -> None:
        self.widget: RunWidget | None = None
        self._handle: Any = None

    def start(self, snapshot: dict[str, Any]) -> None:
        self.widget = RunWidget(live_snapshot(snapshot))
        self._handle = display(self.widget, display_id=True)

    def update(self, snapshot: dict[str, Any]) -> None:
        if self.widget is not None:
            self.widget.snapshot = live_snapshot(snapshot)  # unchanged snapshots are not sent again

    def finish(self, snapshot: dict[str, Any]) -> None:
        self.update(snapshot)
        if self._handle is not None:
            self._handle.update(RunReport(snapshot))
        else:
            display(RunReport(snapshot))
        if self.widget is not None:
            self.widget.close()
