"""The live view: an anywidget whose front end is the run-report renderer (``labextension/src``).

Live and saved look the same because they are drawn by the same TypeScript code: the widget's
ES module (``jupyter_torchdist/static/widget.js``, built from ``labextension/src/widget.ts``) draws
the synced ``snapshot``, and at the end of the run the widget's output is replaced, in place, by
the ``RunReport`` that the JupyterLab extension draws without a kernel.

The kernel sends the whole snapshot up to ten times a second, so it is trimmed to the live budget
(``trim.LIVE``) whatever the number of ranks: log tails and loss curves share fixed budgets.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anywidget
import traitlets
from IPython.display import display

from .report import RunReport
from .schema import RunSnapshot
from .trim import LIVE, REPORT, trim_snapshot

__all__ = ["LiveView", "RunWidget", "live_available", "live_snapshot", "ESM", "CSS"]

STATIC = Path(__file__).resolve().parent.parent / "static"
ESM = STATIC / "widget.js"   # built by `jlpm build:prod` in labextension/ (git-ignored)
CSS = STATIC / "widget.css"


def live_available() -> bool:
    """Whether the widget's front end was built (a checkout without Node has none)."""
    return ESM.is_file() and CSS.is_file()


def live_snapshot(snapshot: Mapping[str, Any]) -> RunSnapshot:
    """The snapshot cut to the live budget: at most about 110 KB for 64 ranks, ten times a second."""
    return trim_snapshot(snapshot, LIVE)


class RunWidget(anywidget.AnyWidget):
    """Syncs one trimmed snapshot; the front end draws it and handles every interaction itself."""

    snapshot = traitlets.Dict().tag(sync=True)
    # Declared traits, filled in __init__: anywidget would only sync a CSS given as a class attribute.
    _esm = traitlets.Unicode().tag(sync=True)
    _css = traitlets.Unicode().tag(sync=True)

    def __init__(self, snapshot: Mapping[str, Any]) -> None:
        # Read at each run, not at import: the module imports without a built front end,
        # and a rebuilt one is picked up without restarting the kernel.
        super().__init__(_esm=ESM.read_text(encoding="utf-8"), _css=CSS.read_text(encoding="utf-8"),
                         snapshot=snapshot)


class LiveView:
    """The ``RunView`` of Jupyter front ends with anywidget: the widget while it runs, the report after."""

    log_tail = REPORT.log_lines  # as many lines as the saved report keeps

    def __init__(self) -> None:
        self.widget: RunWidget | None = None
        self._handle: Any = None

    def start(self, snapshot: dict[str, Any]) -> None:
        self.widget = RunWidget(live_snapshot(snapshot))
        self._handle = display(self.widget, display_id=True)  # type: ignore[no-untyped-call]

    def update(self, snapshot: dict[str, Any]) -> None:
        if self.widget is not None:
            self.widget.snapshot = dict(live_snapshot(snapshot))  # unchanged snapshots are not sent again

    def finish(self, snapshot: dict[str, Any]) -> None:
        self.update(snapshot)
        if self._handle is not None:
            self._handle.update(RunReport(snapshot))
        else:
            display(RunReport(snapshot))  # type: ignore[no-untyped-call]
        if self.widget is not None:
            self.widget.close()
