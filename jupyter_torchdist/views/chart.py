"""The charts of a report as inline SVG (no script, no external file): the loss, one line per rank, and the parts
a sweep's parameter-effect charts (``effects.py``) are drawn with: one scale, one axis, one curve."""
from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Final

from .schema import RankSnapshot

__all__ = ["svg_chart", "PALETTE", "Scale", "label", "y_axis", "line", "svg_open", "line_chart", "nice_ticks"]

PALETTE: Final = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#eeca3b", "#9d755d")
_W, _H, _LEFT, _RIGHT, _TOP, _BOTTOM = 440, 170, 50, 12, 10, 24


def nice_ticks(lo: float, hi: float, target: int = 4) -> tuple[float, float, float, int]:
    """Round bounds covering [lo, hi] and a step of 1, 2 or 5 times a power of ten."""
    if hi == lo:
        pad = abs(lo) * 0.1 or 0.5
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / target
    power = 10 ** math.floor(math.log10(raw))
    unit = raw / power
    step = (1 if unit <= 1 else 2 if unit <= 2 else 5 if unit <= 5 else 10) * power
    decimals = min(8, max(0, -math.floor(math.log10(step) + 1e-9)))
    return math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step, step, decimals


class Scale:
    """Data to chart coordinates in a ``w`` by ``h`` box: y rounded to nice ticks; x over the data, or over
    ``x_range`` when given (a scatter pads its points off the frame; categories sit between half steps)."""

    def __init__(self, series: list[tuple[int, list[list[float]]]], *, size: tuple[int, int] = (_W, _H),
                 x_range: tuple[float, float] | None = None, bottom: int = _BOTTOM) -> None:
        xs = [p[0] for _, pts in series for p in pts]
        ys = [p[1] for _, pts in series for p in pts]
        self.w, self.h, self.bottom = size[0], size[1], bottom
        self.x0, self.x1 = x_range or (min(xs), max(xs))
        if self.x1 == self.x0:
            self.x0, self.x1 = self.x0 - 0.5, self.x1 + 0.5
        self.y0, self.y1, self.step, self.decimals = nice_ticks(min(ys), max(ys))

    def x(self, v: float) -> float:
        return _LEFT + (v - self.x0) / (self.x1 - self.x0) * (self.w - _LEFT - _RIGHT)

    def y(self, v: float) -> float:
        return _TOP + (1 - (v - self.y0) / (self.y1 - self.y0)) * (self.h - _TOP - self.bottom)


def label(x: float, y: float, text: str, anchor: str = "start") -> str:
    """An axis label; ``text`` is escaped here (category names come from the user's grid)."""
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="10" fill="#888">'
            f"{html.escape(text)}</text>")


def y_axis(s: Scale) -> list[str]:
    """Grid lines and labels at round values of y."""
    parts = []
    for i in range(round((s.y1 - s.y0) / s.step) + 1):
        v = s.y0 + i * s.step
        y = s.y(v)
        parts.append(f'<line x1="{_LEFT}" x2="{s.w - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#8884" '
                     f'stroke-width="1"/>' + label(_LEFT - 6, y + 3.5, f"{v:.{s.decimals}f}", "end"))
    return parts


def _axes(s: Scale, x_name: str = "step") -> list[str]:
    """The y axis, and the first and last whole x (``step 1`` ... ``200``)."""
    parts = y_axis(s)
    first, last = math.ceil(s.x0), math.floor(s.x1)
    parts.append(label(s.x(first), s.h - 6, f"{x_name} {first}"))
    if last > first:
        parts.append(label(s.x(last), s.h - 6, str(last), "end"))
    return parts


def line(s: Scale, title: str, pts: Sequence[Sequence[float]], colour: str, faint: bool = False) -> str:
    """One curve (a dot when it has one point), ``title`` its tooltip."""
    if len(pts) == 1:
        return f'<circle cx="{s.x(pts[0][0]):.1f}" cy="{s.y(pts[0][1]):.1f}" r="2.5" fill="{colour}"/>'
    coords = " ".join(f"{s.x(x):.1f},{s.y(y):.1f}" for x, y in pts)
    return (f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="1.6" '
            f'stroke-opacity="{0.55 if faint else 0.95}"><title>{html.escape(title)}</title></polyline>')


def svg_open(s: Scale, aria: str) -> str:
    """The ``<svg>`` tag of a chart of ``s``'s size, scaling to its container's width."""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {s.w} {s.h}" style="width:100%;'
            f'max-width:{s.w}px;height:auto;display:block" role="img" aria-label="{html.escape(aria)}">')


def line_chart(series: list[tuple[int, list[list[float]]]], x_name: str, aria: str) -> str:
    """One curve of [x, y] points (a sweep's best so far), the x axis named ``x_name``."""
    s = Scale(series)
    return svg_open(s, aria) + "".join(_axes(s, x_name)) + line(s, aria, series[0][1], PALETTE[0]) + "</svg>"


def _legend(series: list[tuple[int, list[list[float]]]], many: bool) -> str:
    if many:
        return f'<div style="font-size:11px;color:#888">{len(series)} ranks</div>'
    items = "".join(
        f'<span style="white-space:nowrap;margin-right:10px"><span style="display:inline-block;width:12px;'
        f'height:3px;vertical-align:middle;background:{PALETTE[i % len(PALETTE)]}"></span> '
        f'rank {html.escape(str(rank))}</span>' for i, (rank, _) in enumerate(series))
    return f'<div style="font-size:11px;color:#888">{items}</div>'


def svg_chart(ranks: Sequence[RankSnapshot]) -> str:
    """The loss per rank as an SVG plus its legend; "" when no rank reported a loss."""
    series = [(r["rank"], r["loss_history"]) for r in ranks if r["loss_history"]]
    if not series:
        return ""
    s = Scale(series)
    many = len(series) > len(PALETTE)
    parts = [svg_open(s, "loss per rank"), *_axes(s)]
    for i, (rank, pts) in enumerate(series):
        parts.append(line(s, f"rank {rank}", pts, PALETTE[(rank if many else i) % len(PALETTE)], many))
    return "".join(parts) + "</svg>" + _legend(series, many)
