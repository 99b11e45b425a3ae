"""A sweep's parameter effect, for the HTML fallback and the saved report (``compare.py``): per parameter, each
finished member's metric against that parameter's value, and the best metric so far over the members.

Drawn with ``chart.py``'s scale, axis and curve, so the report's charts read alike; inline SVG only (no script,
no network), every name and value from the snapshot escaped. ``labextension/src/effects.ts`` draws the same live.
A snapshot without the search fields (an older sweep) draws no section at all.
"""
from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

from .chart import PALETTE, Scale, label, line_chart, svg_open, y_axis
from .style import fmt_metric, finite

__all__ = ["effects_html", "PLOTTED", "MAX_PARAMS"]

PLOTTED: Final = ("done", "stopped_early")   # members whose best metric is a result (a failed one's is not)
MAX_PARAMS: Final = 12                # scatters drawn at most (a sweep of more parameters shows the first ones)
_SIZE: Final = (260, 150)
_BOTTOM: Final = 32                   # room under the plot for the tick labels and the axis name
_MAX_CATEGORY_TICKS: Final = 5        # more categories than this: only the first and last are labelled
_DOT, _BEST = PALETTE[0], PALETTE[1]


class _Axis(NamedTuple):
    """Where each member sits along one parameter, and how the axis is labelled."""
    xs: list[float]
    x_range: tuple[float, float]
    ticks: list[tuple[float, str]]   # (position, text)
    title: str                       # "lr (log)"


def _kind(declared: Any, values: Sequence[Any]) -> str:
    """The scale the sweep declared, else linear for numbers and category for anything else."""
    numeric = all(finite(v) is not None for v in values)
    if declared in ("log", "linear") and numeric:
        return "log" if declared == "log" and all(v > 0 for v in values) else "linear"
    return "linear" if numeric and declared != "category" else "category"


def _axis(name: str, declared: Any, values: Sequence[Any]) -> _Axis:
    """Positions on the x axis: log10 of the value on a log scale, the value on a linear one, and categories
    spread evenly in the order they first appear."""
    kind = _kind(declared, values)
    if kind == "category":
        cats = list(dict.fromkeys(str(v) for v in values))
        shown = cats if len(cats) <= _MAX_CATEGORY_TICKS else [cats[0], cats[-1]]
        return _Axis([float(cats.index(str(v))) for v in values], (-0.5, len(cats) - 0.5),
                     [(float(cats.index(c)), c[:12]) for c in shown], name)
    xs = [math.log10(v) if kind == "log" else float(v) for v in values]
    lo, hi = min(xs), max(xs)
    pad = (hi - lo) * 0.08 or 0.5
    ends = [(lo, fmt_metric(min(values)))] + ([(hi, fmt_metric(max(values)))] if hi > lo else [])
    return _Axis(xs, (lo - pad, hi + pad), ends, f"{name} (log)" if kind == "log" else name)


def _dot(s: Scale, x: float, y: float, run: Mapping[str, Any], best: bool, tip: str) -> str:
    """A member's point: filled when it finished, hollow when stopped early, larger and orange for the best."""
    colour, r = (_BEST, 4.5) if best else (_DOT, 3.0)
    paint = (f'fill="none" stroke="{colour}" stroke-width="1.4"' if run.get("state") == "stopped_early"
             else f'fill="{colour}" fill-opacity="0.85"')
    return (f'<circle cx="{s.x(x):.1f}" cy="{s.y(y):.1f}" r="{r}" {paint} data-state="'
            f'{html.escape(str(run.get("state")))}"><title>{html.escape(tip)}</title></circle>')


def _tip(run: Mapping[str, Any], metric: str, y: float) -> str:
    at = finite(run.get("stopped_early_at"))
    return (f"run {run.get('id')}: {run.get('label', '')}, {metric} {fmt_metric(y)}"
            + (f" (stopped early @ {int(at)})" if at is not None else ""))


def _scatter(name: str, declared: Any, members: list[tuple[Mapping[str, Any], float]], best_id: Any,
             metric: str) -> str:
    """One parameter's chart: the members' metric (y) against its value (x)."""
    axis = _axis(name, declared, [(run.get("params") or {}).get(name) for run, _ in members])
    placed = [(run, x, y) for (run, y), x in zip(members, axis.xs)]
    s = Scale([(0, [[x, y] for _, x, y in placed])], size=_SIZE, x_range=axis.x_range, bottom=_BOTTOM)
    parts = [svg_open(s, f"{metric} against {name}"), *y_axis(s)]
    parts += [label(s.x(x), s.h - 18, text, "middle") for x, text in axis.ticks]
    parts.append(label(s.w / 2, s.h - 3, axis.title, "middle"))
    parts += [_dot(s, x, y, run, best_id is not None and run.get("id") == best_id, _tip(run, metric, y))
              for run, x, y in placed]
    return f"<div style='width:{_SIZE[0]}px'>{''.join(parts)}</svg></div>"


def _members(snap: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], float]]:
    """The finished and stopped-early members with a metric: (row, its best metric)."""
    out = []
    for run in snap.get("runs") or []:
        if isinstance(run, Mapping) and run.get("state") in PLOTTED:
            y = finite(run.get("metric_best"))
            if y is not None and isinstance(run.get("params"), Mapping):
                out.append((run, float(y)))
    return out


def _best_so_far(snap: Mapping[str, Any], metric: str) -> str:
    raw = snap.get("best_so_far")
    pts = [[float(p[0]), float(p[1])] for p in raw if isinstance(p, (list, tuple)) and len(p) >= 2
           and finite(p[0]) is not None and finite(p[1]) is not None] if isinstance(raw, list) else []
    if not pts:
        return ""
    return f"<figure style='margin:0;width:440px'><figcaption style='font-size:11px;color:#888'>" \
        f"best {html.escape(metric)} so far, over the members as they finish</figcaption>" \
        f"{line_chart([(0, pts)], 'member', f'best {metric} so far')}</figure>"


def effects_html(snap: Mapping[str, Any]) -> str:
    """The "parameter effect" section, or "" when no member has a metric to plot and no best-so-far curve."""
    metric = str(snap.get("metric") or "metric")
    names = [str(n) for n in snap.get("names") or []][:MAX_PARAMS]
    raw = snap.get("scales")
    scales: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    members = _members(snap)
    charts = [_scatter(n, scales.get(n), [(r, y) for r, y in members if n in r["params"]], snap.get("best_id"),
                       metric) for n in names if any(n in r["params"] for r, _ in members)]
    charts.append(_best_so_far(snap, metric))
    if not any(charts):
        return ""
    mode = {"min": "lower is better", "max": "higher is better"}.get(str(snap.get("mode")), "")
    note = (f"best {metric} of each finished member{f' ({mode})' if mode else ''}; hollow: stopped early; "
            "orange: the best")
    return (f"<div class='jp-TorchDist-effects' style='margin-top:8px'><div><b>parameter effect</b> "
            f"<span style='color:#888;font-size:12px'>{html.escape(note)}</span></div>"
            f"<div style='display:flex;flex-wrap:wrap;gap:10px;align-items:flex-start'>{''.join(charts)}</div></div>")
