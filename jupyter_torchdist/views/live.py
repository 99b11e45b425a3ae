"""The live view: an anywidget whose front end is the run-report renderer (``labextension/src``).

Live and saved look the same because they are drawn by the same TypeScript code: the widget's
ES module (``jupyter_torchdist/static/widget.js``, built from ``labextension/src/widget.ts``) draws
the synced ``snapshot``, and at the end of the run the widget's output is replaced, in place, by
the ``RunReport`` that the JupyterLab extension draws without a kernel.

The kernel sends the whole snapshot up to ten times a second, so it is trimmed to the live budget
(``trim.LIVE``) whatever the number of ranks: log tails and loss curves share fixed budgets.

A background run's view is updated from the run's own thread while other cells execute. Widget messages reach it
whatever cell runs (front ends route them by the widget's id), but a display update would not: JupyterLab applies
one only to the cell whose execution sent it. So at the end the widget also gets the report (``report``), and the
JupyterLab extension puts the report in the widget's place in the notebook (``labextension/src/plugin.ts``), so the
saved notebook holds it; front ends that apply display updates anywhere (nbclient, the classic notebook) get one too.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anywidget
import traitlets
from IPython.display import display

from .report import RunReport, report_bundle
from .schema import RunSnapshot
from .trim import LIVE, REPORT, trim_snapshot

__all__ = ["LiveView", "RunWidget", "SweepWidget", "live_available", "live_snapshot", "ESM", "CSS"]

STATIC = Path(__file__).resolve().parent.parent / "static"
ESM = STATIC / "widget.js"   # built by `jlpm build:prod` in labextension/ (git-ignored)
CSS = STATIC / "widget.css"


def live_available() -> bool:
    """Whether the widget's front end was built (a checkout without Node has none)."""
    return ESM.is_file() and CSS.is_file()


def live_snapshot(snapshot: Mapping[str, Any]) -> RunSnapshot:
    """The snapshot cut to the live budget: at most about 110 KB for 64 ranks, ten times a second."""
    return trim_snapshot(snapshot, LIVE)


class _FrontEnd(anywidget.AnyWidget):
    """The front end both widgets share (``widget.ts`` draws a run, or a sweep when the model has ``sweep``)."""

    # Declared traits, filled in __init__: anywidget would only sync a CSS given as a class attribute.
    _esm = traitlets.Unicode().tag(sync=True)
    _css = traitlets.Unicode().tag(sync=True)
    report = traitlets.Dict().tag(sync=True)  # a background run's (or a sweep's) report bundle, once it has ended

    def __init__(self, **traits: Any) -> None:
        # Read at each run, not at import: the module imports without a built front end,
        # and a rebuilt one is picked up without restarting the kernel.
        super().__init__(_esm=ESM.read_text(encoding="utf-8"), _css=CSS.read_text(encoding="utf-8"), **traits)


class RunWidget(_FrontEnd):
    """Syncs one trimmed snapshot; the front end draws it and handles every interaction itself."""

    snapshot = traitlets.Dict().tag(sync=True)

    def __init__(self, snapshot: Mapping[str, Any]) -> None:
        super().__init__(snapshot=snapshot)


class SweepWidget(_FrontEnd):
    """A sweep's comparison view (``compare.py``): syncs the sweep's snapshot."""

    sweep = traitlets.Dict().tag(sync=True)

    def __init__(self, sweep: Mapping[str, Any]) -> None:
        super().__init__(sweep=sweep)


class LiveView:
    """The ``RunView`` of Jupyter front ends with anywidget: the widget while it runs, the report after."""

    log_tail = REPORT.log_lines  # as many lines as the saved report keeps

    def __init__(self, background: bool = False) -> None:
        self.widget: RunWidget | None = None
        self._handle: Any = None
        self.background = background  # updated from the run's thread while other cells execute

    def start(self, snapshot: dict[str, Any]) -> None:
        self.widget = RunWidget(live_snapshot(snapshot))
        self._handle = display(self.widget, display_id=True)  # type: ignore[no-untyped-call]

    def update(self, snapshot: dict[str, Any]) -> None:
        if self.widget is not None:
            self.widget.snapshot = dict(live_snapshot(snapshot))  # unchanged snapshots are not sent again

    def finish(self, snapshot: dict[str, Any]) -> None:
        self.update(snapshot)
        if self.background and self.widget is not None and self._handle is not None:
            self.widget.report = report_bundle(snapshot)  # the extension puts it in the widget's place
            self._handle.update(RunReport(snapshot))       # where display updates reach any cell
            return  # the widget stays: where neither applies, it shows the run's last frame
        if self._handle is not None:
            self._handle.update(RunReport(snapshot))
        else:
            display(RunReport(snapshot))  # type: ignore[no-untyped-call]
        if self.widget is not None:
            self.widget.close()
