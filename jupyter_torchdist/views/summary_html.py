"""A many-rank run's summary as self-contained HTML (the report's fallback, ``report_html``): counts by state, each
measure's quantiles, the ranks worth a look and where the ranks wait, grouped. The extension draws the same from
``labextension/src/summary.ts``, with the paged table of every rank."""
from __future__ import annotations

import html
from typing import Any, Final

from .schema import GroupSnapshot, SummarySnapshot
from .style import colour, tally_counts

__all__ = ["summary_html", "groups_html"]

_TH: Final = "text-align:right;padding:3px 8px;font-size:11px;color:#888;text-transform:uppercase"
_TD: Final = "text-align:right;padding:2px 8px;border-top:1px solid #8883;font-variant-numeric:tabular-nums"


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _number(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def _quantiles(summary: SummarySnapshot) -> str:
    head = "".join(f'<th style="{_TH}">{h}</th>' for h in ("", "min", "25%", "median", "75%", "max", "ranks"))
    rows = "".join(f'<tr><td style="{_TD};text-align:left;font-weight:600">{_e(q["name"])}</td>'
                   + "".join(f'<td style="{_TD}">{_e(_number(v))}</td>' for v in q["q"])
                   + f'<td style="{_TD}">{q["n"]:,}</td></tr>' for q in summary["quantiles"])
    return f'<table style="border-collapse:collapse;font-size:12px"><thead><tr>{head}</tr></thead>{rows}</table>'


def groups_html(title: str, groups: list[GroupSnapshot]) -> str:
    """Ranks that say the same thing, a line per group: how many, the first few, what they say."""
    items = "".join(f'<li><strong>{g["ranks"]:,} rank{"s" if g["ranks"] != 1 else ""}</strong> '
                    f'({_e(", ".join(map(str, g["sample"])))}{", ..." if g["ranks"] > len(g["sample"]) else ""}): '
                    f'{_e(g["summary"])}</li>' for g in groups)
    return f'<div style="margin-top:6px"><strong>{_e(title)}</strong><ul style="margin:2px 0">{items}</ul></div>'


def summary_html(summary: SummarySnapshot) -> str:
    counts = tally_counts(summary["counts"])
    out = [f'<div class="jtd-summary" style="margin-top:8px"><div style="color:#888;font-size:12px">ranks: '
           f'{_e(counts)} · {len(summary["hosts"]):,} hosts</div>', _quantiles(summary)]
    if summary["outliers"]:
        items = "".join(f'<li><strong>rank {o["rank"]}</strong> on {_e(o["host"])}: <span style="color:'
                        f'{colour("failed") if o["why"] == "failed" else "inherit"}">{_e(o["why"])}</span> '
                        f'({_e(o["detail"])})</li>' for o in summary["outliers"])
        out.append(f'<div style="margin-top:6px"><strong>Ranks worth a look</strong><ul style="margin:2px 0">'
                   f'{items}</ul></div>')
    if summary["places"]:
        out.append(groups_html("Where the ranks are", summary["places"]))
    return "".join(out) + "</div>"
