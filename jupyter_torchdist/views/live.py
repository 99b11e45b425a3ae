"""The live view: an anywidget whose front end is the run-report renderer (``labextension/src``).

Live and saved look the same because they are drawn by the same TypeScript code: the widget's
ES module (``jupyter_torchdist/static/widget.js``, built from ``labextension/src/widget.ts``) draws
the synced ``snapshot``, and at the end of the run the widget's output is replaced, in place, by
the ``RunReport`` that the JupyterLab extension draws without a kernel.

The kernel sends the whole snapshot up to ten times a second, trimmed to the live budget (``trim.LIVE``): log
tails and loss curves share fixed budgets. The widget traffic is held to a byte budget a second whatever the number
of ranks (``SNAPSHOT_BYTES_S``, ``TABLE_BYTES_S``): after a frame of B bytes the view asks the supervisor to wait
B / budget before the next. A many-rank run's compact table of every rank goes in its own trait, less often than
the summary; the front end asks for a rank's full row by setting ``focus``.

A background run's view is updated from the run's own thread while other cells execute. Widget messages reach it
whatever cell runs (front ends route them by the widget's id), but a display update would not: JupyterLab applies
one only to the cell whose execution sent it. So at the end the widget also gets the report (``report``), and the
JupyterLab extension puts the report in the widget's place in the notebook (``labextension/src/plugin.ts``), so the
saved notebook holds it; front ends that apply display updates anywhere (nbclient, the classic notebook) get one too.
"""
from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

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
SNAPSHOT_BYTES_S: Final = 100_000  # the snapshot trait's bytes a second, at most (about 10 frames of 10 KB)
TABLE_BYTES_S: Final = 40_000      # the many-rank table's
TABLE_MIN_S: Final = 1.0           # ... sent at most once a second
REPORT_PLACED: Final = "report-placed"  # the front end's word: the report is in the widget's place (stop.ts)
MANY_FRAME_S: Final = 0.25         # a many-rank run's frames: each is O(ranks) to make
# A foreground run's widget appears once the run has gone on this long: a cell that ends sooner (a kept cell, a warm
# rerun) shows its report only, without the widget's messages (its module, its frames, its closing) before it.
SHOW_AFTER_S: Final = 0.3


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
        self.on_msg(self._from_front_end)

    def _from_front_end(self, _: Any, content: Any, buffers: Any) -> None:
        """The front end put the report in the widget's place in the notebook (``report.ts``): the widget's work is
        done, and closing it gives back what the kernel held for it. Where no front end says so (one without the
        extension shows the widget's last frame instead), the widget stays."""
        if isinstance(content, dict) and content.get("event") == REPORT_PLACED and self.report:
            self.close()
            for name in self.released:  # the notebook holds the report now; this widget is never drawn again
                self.set_trait(name, type(getattr(self, name))())

    released: tuple[str, ...] = ("report", "_esm", "_css")


class RunWidget(_FrontEnd):
    """Syncs one trimmed snapshot; the front end draws it and handles every interaction itself."""

    snapshot = traitlets.Dict().tag(sync=True)
    table = traitlets.Dict().tag(sync=True)  # a many-rank run's every rank in a few columns (schema.TableSnapshot)
    focus = traitlets.List(traitlets.Int()).tag(sync=True)  # ranks the user opened: their full rows are sent

    released = ("report", "_esm", "_css", "snapshot", "table")

    def __init__(self, snapshot: Mapping[str, Any]) -> None:
        super().__init__(snapshot=snapshot)


class SweepWidget(_FrontEnd):
    """A sweep's comparison view (``compare.py``): syncs the sweep's snapshot."""

    sweep = traitlets.Dict().tag(sync=True)

    released = ("report", "_esm", "_css", "sweep")

    def __init__(self, sweep: Mapping[str, Any]) -> None:
        super().__init__(sweep=sweep)


def _size(value: Any) -> int:
    """About the bytes a trait's value takes on the wire."""
    return len(json.dumps(value, separators=(",", ":"), default=str))


def _wants_the_user(snapshot: Mapping[str, Any]) -> bool:
    """A rank waits at a pdb prompt, or the run is said to be stalled: the view shows at once, whatever its age."""
    return bool(snapshot.get("stall")) or any(r.get("paused") for r in snapshot.get("ranks") or ())


class LiveView:
    """The ``RunView`` of Jupyter front ends with anywidget: the widget while it runs, the report after."""

    log_tail = REPORT.log_lines  # as many lines as the saved report keeps

    def __init__(self, background: bool = False, show_after: float = 0.0) -> None:
        self.widget: RunWidget | None = None
        self.show_after = show_after   # a foreground run's widget waits this long (make_view: SHOW_AFTER_S)
        self._handle: Any = None
        self.background = background  # updated from the run's thread while other cells execute
        self._table_due = 0.0          # when the table may be sent again
        self._table_held = False       # a newer table waits for its turn
        self._due: float | None = None  # a foreground run's widget is drawn from then on (SHOW_AFTER_S)

    @property
    def focus(self) -> frozenset[int]:
        return frozenset(self.widget.focus) if self.widget is not None else frozenset()

    def start(self, snapshot: dict[str, Any]) -> None:
        """A background run's view, or a queued run's, is drawn at once; a foreground run's once it is due."""
        if self.background or self.show_after <= 0 or snapshot.get("status") == "queued":
            self._show(snapshot)
        else:
            self._due = time.monotonic() + self.show_after

    def _show(self, snapshot: dict[str, Any]) -> None:
        self._due = None
        live: dict[str, Any] = dict(live_snapshot(snapshot))
        table = live.pop("table", None) or {}
        self.widget = RunWidget(live)
        self.widget.table = table
        self._handle = display(self.widget, display_id=True)  # type: ignore[no-untyped-call]

    def update(self, snapshot: dict[str, Any], *, final: bool = False) -> float | None:
        """Send the frame; returns how long to wait before the next one (its bytes over the budget, or the time
        until the widget is due), or None."""
        if self.widget is None:
            if self._due is None or final:
                return None
            if (left := self._due - time.monotonic()) > 0 and not _wants_the_user(snapshot):
                return left  # the supervisor draws again then, whether or not anything changed
            self._show(snapshot)
            return None
        live: dict[str, Any] = dict(live_snapshot(snapshot))
        table = live.pop("table", None) or {}
        live["table"] = None
        hold = None
        if live != self.widget.snapshot:  # unchanged snapshots are not sent again
            self.widget.snapshot = live
            hold = _size(live) / SNAPSHOT_BYTES_S
        now = time.monotonic()
        if table != self.widget.table:
            if final or now >= self._table_due:
                self.widget.table = table
                self._table_due, self._table_held = now + max(TABLE_MIN_S, _size(table) / TABLE_BYTES_S), False
            else:
                self._table_held = True
        if live.get("summary") is not None:  # a many-rank run: a summary four times a second is plenty
            hold = max(hold or 0.0, MANY_FRAME_S)
        if self._table_held:  # come back when the table may go
            return max(hold or 0.0, self._table_due - now)
        return hold if hold is not None and hold > 0.1 else None  # a small frame: the usual pace

    def finish(self, snapshot: dict[str, Any]) -> None:
        self.update(snapshot, final=True)
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
