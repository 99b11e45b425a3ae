"""The loss curves of a report as inline SVG (no script, no external file): one line per rank."""
from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Final

from .schema import RankSnapshot

__all__ = ["svg_chart", "PALETTE"]

PALETTE: Final = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#eeca3b", "#9d755d")
_W, _H, _LEFT, _RIGHT, _TOP, _BOTTOM = 440, 170, 50, 12, 10, 24


def _nice_ticks(lo: float, hi: float, target: int = 4) -> tuple[float, float, float, int]:
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


class _Scale:
    def __init__(self, series: list[tuple[int, list[list[float]]]]) -> None:
        xs = [p[0] for _, pts in series for p in pts]
        ys = [p[1] for _, pts in series for p in pts]
        self.x0, self.x1 = min(xs), max(xs)
        if self.x1 == self.x0:
            self.x0, self.x1 = self.x0 - 0.5, self.x1 + 0.5
        self.y0, self.y1, self.step, self.decimals = _nice_ticks(min(ys), max(ys))

    def x(self, v: float) -> float:
        return _LEFT + (v - self.x0) / (self.x1 - self.x0) * (_W - _LEFT - _RIGHT)

    def y(self, v: float) -> float:
        return _TOP + (1 - (v - self.y0) / (self.y1 - self.y0)) * (_H - _TOP - _BOTTOM)


def _axes(s: _Scale) -> list[str]:
    parts = []
    for i in range(round((s.y1 - s.y0) / s.step) + 1):
        v = s.y0 + i * s.step
        y = s.y(v)
        parts.append(f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#8884" '
                     f'stroke-width="1"/><text x="{_LEFT - 6}" y="{y + 3.5:.1f}" text-anchor="end" '
                     f'font-size="10" fill="#888">{v:.{s.decimals}f}</text>')
    first, last = math.ceil(s.x0), math.floor(s.x1)
    parts.append(f'<text x="{s.x(first):.1f}" y="{_H - 6}" font-size="10" fill="#888">step {first}</text>')
    if last > first:
        parts.append(f'<text x="{s.x(last):.1f}" y="{_H - 6}" text-anchor="end" font-size="10" '
                     f'fill="#888">{last}</text>')
    return parts


def _line(s: _Scale, rank: int, pts: Sequence[Sequence[float]], colour: str, faint: bool) -> str:
    if len(pts) == 1:
        return f'<circle cx="{s.x(pts[0][0]):.1f}" cy="{s.y(pts[0][1]):.1f}" r="2.5" fill="{colour}"/>'
    coords = " ".join(f"{s.x(x):.1f},{s.y(y):.1f}" for x, y in pts)
    return (f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="1.6" '
            f'stroke-opacity="{0.55 if faint else 0.95}"><title>rank {rank}</title></polyline>')


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
    s = _Scale(series)
    many = len(series) > len(PALETTE)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" style="width:100%;'
             f'max-width:{_W}px;height:auto;display:block" role="img" aria-label="loss per rank">', *_axes(s)]
    for i, (rank, pts) in enumerate(series):
        parts.append(_line(s, rank, pts, PALETTE[(rank if many else i) % len(PALETTE)], many))
    return "".join(parts) + "</svg>" + _legend(series, many)
