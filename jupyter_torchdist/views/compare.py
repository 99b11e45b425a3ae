"""A sweep's one comparison view: a row per run with its progress, every run's loss on one chart, a sortable table
of the last metrics, failed runs named; for a search, what it searches and judges by, the best member marked, members
its early-stopping rule stopped with the step they were stopped at and why, and each parameter's effect on the
metric (``effects.py``). Drawn from ``schema.SweepSnapshot`` by ``labextension/src/compare.ts``, live
(an anywidget) and saved (``SWEEP_MIME``, with HTML and text fallbacks), as a run's view and report are.
"""
from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import Any, Final

from .effects import effects_html
from .style import DASH, colour, duration, finite, fmt_metric, state_words, tally_counts
from .report_text import text_table

__all__ = ["SWEEP_MIME", "SweepReport", "sweep_bundle", "sweep_text", "sweep_html", "SweepView", "state_text",
           "BEST_MARK", "ENDED"]

SWEEP_MIME: Final = "application/vnd.jupyter-torchdist.sweep+json"
_MAX_METRICS: Final = 6   # metric columns the fallbacks show (the front end shows every one)
BEST_MARK: Final = "\u2605"
ENDED: Final = ("done", "stopped_early", "failed", "stopped")
_FIGURES: Final = (("steps", "steps"), ("{} best", "metric_best"), ("{} last", "metric_last"))


def _runs(snap: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [r for r in snap.get("runs") or [] if isinstance(r, Mapping)]


def _figures(snap: Mapping[str, Any], runs: list[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The member columns a search adds (steps, the metric's best and last), each only when some member has it:
    a snapshot from before searches shows the columns it always had."""
    metric = str(snap.get("metric") or "metric")
    return [(head.format(metric), key) for head, key in _FIGURES if any(r.get(key) is not None for r in runs)]


def _metric_names(snap: Mapping[str, Any], runs: list[Mapping[str, Any]]) -> list[str]:
    """The reported metrics' names, less the sweep's metric when its own columns already show it."""
    skip = snap.get("metric") if any(r.get("metric_last") is not None for r in runs) else None
    names: list[str] = []
    for run in runs:
        for key in (run.get("metrics") or {}):
            if key not in names and key != skip:
                names.append(key)
    return names[:_MAX_METRICS]


def _progress(run: Mapping[str, Any]) -> str:
    step, total = run.get("step"), run.get("total")
    if step is None:
        return DASH
    return f"{step}/{total}" if total else str(step)


def state_text(run: Mapping[str, Any]) -> str:
    """``stopped early @ 9`` (a member its rule stopped says how far it got), ``done (past)`` for a member of an
    earlier kernel."""
    state = str(run.get("state") or "queued")
    at = finite(run.get("stopped_early_at"))
    text = f"{state_words(state)} @ {int(at)}" if state == "stopped_early" and at is not None else state_words(state)
    return f"{text} (past)" if run.get("past") else text


def _is_best(snap: Mapping[str, Any], run: Mapping[str, Any]) -> bool:
    best = snap.get("best_id")
    return best is not None and not isinstance(best, bool) and run.get("id") == best


def _cells(snap: Mapping[str, Any], run: Mapping[str, Any], figures: list[tuple[str, str]],
           metrics: list[str]) -> list[str]:
    secs = run.get("elapsed_s")
    ident = str(run.get("id", "")) + (f" {BEST_MARK}" if _is_best(snap, run) else "")
    return ([ident, str(run.get("label", "")), state_text(run), _progress(run)]
            + [fmt_metric(run.get(key)) for _, key in figures]
            + [fmt_metric((run.get("metrics") or {}).get(m)) for m in metrics]
            + [duration(secs) if secs is not None else DASH])


def _table(snap: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The header and one row of cells per member, for both fallbacks."""
    runs = _runs(snap)
    figures, metrics = _figures(snap, runs), _metric_names(snap, runs)
    head = ["run", "params", "state", "step", *[h for h, _ in figures], *metrics, "time"]
    return head, [_cells(snap, r, figures, metrics) for r in runs]


def _about(snap: Mapping[str, Any]) -> str:
    """What kind of sweep it is: ``random search, loss (min), early stop: asha, 7 of 20 members ended``; "" for a
    snapshot from before searches."""
    parts = []
    if snap.get("search"):
        parts.append(f"{snap['search']} search")
    if snap.get("metric"):
        parts.append(f"{snap['metric']} ({snap['mode']})" if snap.get("mode") else str(snap["metric"]))
    stop = snap.get("early_stop")
    if stop:
        parts.append("no early stop" if stop == "none" else f"early stop: {stop}")
    trials = finite(snap.get("trials"))
    if trials:
        ended = sum(1 for r in _runs(snap) if r.get("state") in ENDED)
        parts.append(f"{ended} of {int(trials)} members ended")
    return ", ".join(parts)


def _notes(snap: Mapping[str, Any]) -> list[str]:
    """The lines under the table: the best member, then why each failed, stopped or stopped-early member ended."""
    runs = _runs(snap)
    metric = str(snap.get("metric") or "metric")
    best = [f"best: run {r.get('id')} ({r.get('label')}), {metric} {fmt_metric(r.get('metric_best'))}"
            for r in runs if _is_best(snap, r)]
    return best + [f"run {r.get('id')} ({r.get('label')}) {state_text(r)}: {r.get('error') or r.get('why')}"
                   for r in runs if r.get("error") or (r.get("state") == "stopped_early" and r.get("why"))]


def _title(snap: Mapping[str, Any]) -> str:
    return f"{snap.get('title', 'sweep')}: {snap.get('status', '')}, {_counts(snap)}"


def sweep_text(snap: Mapping[str, Any]) -> str:
    """The sweep as a plain-text table, what kind of sweep above it, the best and the ended members below."""
    head, rows = _table(snap)
    about = _about(snap)
    return "\n".join([_title(snap), *([about] if about else []), *text_table(head, rows), *_notes(snap)])


def _counts(snap: Mapping[str, Any]) -> str:
    counts = snap.get("counts")
    plain = {str(k): n for k, n in counts.items() if isinstance(n, int)} if isinstance(counts, Mapping) else {}
    return tally_counts(plain) or "no runs"


def _row_html(snap: Mapping[str, Any], run: Mapping[str, Any], cells: list[str]) -> str:
    """A member's row: its state in its colour (the rule's reason as a tooltip of one stopped early), the best
    bold."""
    cells_html = [html.escape(c) for c in cells]
    tip = f" title='{html.escape(str(run['why']), quote=True)}'" if run.get("why") else ""
    cells_html[2] = f"<span style='color:{colour(_status_of(str(run.get('state'))))}'{tip}>{cells_html[2]}</span>"
    weight = " style='font-weight:600'" if _is_best(snap, run) else ""
    return f"<tr{weight}>" + "".join(f"<td style='padding:2px 8px'>{c}</td>" for c in cells_html) + "</tr>"


def sweep_html(snap: Mapping[str, Any]) -> str:
    """A self-contained HTML table and the parameter effect (GitHub, nbviewer, front ends without the extension)."""
    head, rows = _table(snap)
    head_html = "".join(f"<th style='text-align:left;padding:2px 8px'>{html.escape(h)}</th>" for h in head)
    body = "".join(_row_html(snap, run, cells) for run, cells in zip(_runs(snap), rows))
    notes = "".join(f"<li>{html.escape(line)}</li>" for line in _notes(snap))
    about = _about(snap)
    about_html = f"<div style='color:#888;font-size:12px'>{html.escape(about)}</div>" if about else ""
    return (f"<div class='jp-TorchDist-sweep'><div><b>{html.escape(_title(snap))}</b></div>{about_html}<table>"
            f"<thead><tr>{head_html}</tr></thead><tbody>{body}</tbody></table>"
            f"{f'<ul>{notes}</ul>' if notes else ''}{effects_html(snap)}</div>")


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
