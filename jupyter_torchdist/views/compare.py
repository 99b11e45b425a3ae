"""A sweep's one comparison view: a row per run with its progress, every run's loss on one chart, a sortable table
of the last metrics, failed runs named. Drawn from ``schema.SweepSnapshot`` by ``labextension/src/compare.ts``, live
(an anywidget) and saved (``SWEEP_MIME``, with HTML and text fallbacks), as a run's view and report are.
"""
from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import Any, Final

from .style import DASH, colour, duration, fmt_metric
from .table import text_table

__all__ = ["SWEEP_MIME", "SweepReport", "sweep_bundle", "sweep_text", "sweep_html", "SweepView"]

SWEEP_MIME: Final = "application/vnd.jupyter-torchdist.sweep+json"
_MAX_METRICS: Final = 6   # metric columns the fallbacks show (the front end shows every one)


def _metric_names(snap: Mapping[str, Any]) -> list[str]:
    names: list[str] = []
    for run in snap.get("runs") or []:
        for key in (run.get("metrics") or {}):
            if key not in names:
                names.append(key)
    return names[:_MAX_METRICS]


def _progress(run: Mapping[str, Any]) -> str:
    step, total = run.get("step"), run.get("total")
    if step is None:
        return DASH
    return f"{step}/{total}" if total else str(step)


def _cells(run: Mapping[str, Any], metrics: list[str]) -> list[str]:
    secs = run.get("elapsed_s")
    return ([str(run.get("id", "")), str(run.get("label", "")), str(run.get("state", "")), _progress(run)]
            + [fmt_metric((run.get("metrics") or {}).get(m)) for m in metrics]
            + [duration(secs) if secs is not None else DASH])


def sweep_text(snap: Mapping[str, Any]) -> str:
    """The sweep as a plain-text table, failed runs named below it."""
    metrics = _metric_names(snap)
    head = ["run", "params", "state", "step", *metrics, "time"]
    lines = [f"{snap.get('title', 'sweep')}: {snap.get('status', '')}, {_counts(snap)}"]
    lines += text_table(head, [_cells(r, metrics) for r in snap.get("runs") or []])
    lines += [f"run {r.get('id')} ({r.get('label')}) {r.get('state')}: {r.get('error')}"
              for r in snap.get("runs") or [] if r.get("error")]
    return "\n".join(lines)


def _counts(snap: Mapping[str, Any]) -> str:
    counts = snap.get("counts") or {}
    return ", ".join(f"{n} {state}" for state, n in counts.items() if n) or "no runs"


def sweep_html(snap: Mapping[str, Any]) -> str:
    """A self-contained HTML table (GitHub, nbviewer, front ends without the extension)."""
    metrics = _metric_names(snap)
    head = "".join(f"<th style='text-align:left;padding:2px 8px'>{html.escape(h)}</th>"
                   for h in ["run", "params", "state", "step", *metrics, "time"])
    body = []
    for run in snap.get("runs") or []:
        cells = _cells(run, metrics)
        state = html.escape(cells[2])
        cells_html = [html.escape(c) for c in cells]
        cells_html[2] = f"<span style='color:{colour(_status_of(cells[2]))}'>{state}</span>"
        body.append("<tr>" + "".join(f"<td style='padding:2px 8px'>{c}</td>" for c in cells_html) + "</tr>")
    errors = "".join(f"<li>run {r.get('id')} ({html.escape(str(r.get('label')))}): {html.escape(str(r.get('error')))}"
                     "</li>" for r in snap.get("runs") or [] if r.get("error"))
    title = html.escape(f"{snap.get('title', 'sweep')}: {snap.get('status', '')}, {_counts(snap)}")
    return (f"<div class='jp-TorchDist-sweep'><div><b>{title}</b></div><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>{f'<ul>{errors}</ul>' if errors else ''}</div>")


def _status_of(state: str) -> str:
    return {"done": "succeeded"}.get(state, state)


def sweep_bundle(snap: Mapping[str, Any]) -> dict[str, object]:
    return {SWEEP_MIME: dict(snap), "text/html": sweep_html(snap), "text/plain": sweep_text(snap)}


class SweepReport:
    """A sweep snapshot that displays itself (the saved comparison view)."""

    def __init__(self, snapshot: Mapping[str, Any]) -> None:
        self.snapshot = dict(snapshot)

    def _repr_mimebundle_(self, include: Iterable[str] | None = None,
                          exclude: Iterable[str] | None = None) -> dict[str, object]:
        return sweep_bundle(self.snapshot)

    def __repr__(self) -> str:
        return sweep_text(self.snapshot)


class SweepView:
    """The comparison view in a Jupyter front end: an anywidget updated from the sweep's thread; at the end the
    saved report goes in its place (as for a background run: ``views/live.py``)."""

    def __init__(self) -> None:
        self.widget: Any = None
        self._handle: Any = None

    def start(self, snapshot: dict[str, Any]) -> None:
        from IPython.display import display

        from .live import SweepWidget

        self.widget = SweepWidget(snapshot)
        self._handle = display(self.widget, display_id=True)  # type: ignore[no-untyped-call]

    def update(self, snapshot: dict[str, Any]) -> None:
        if self.widget is not None:
            self.widget.sweep = dict(snapshot)

    def finish(self, snapshot: dict[str, Any]) -> None:
        self.update(snapshot)
        if self.widget is not None and self._handle is not None:
            self.widget.report = sweep_bundle(snapshot)
            self._handle.update(SweepReport(snapshot))
