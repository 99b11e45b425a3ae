"""The run report as self-contained HTML: inline styles only, no scripts, every string escaped.

The fallback for front ends without our extension (GitHub, nbviewer, VS Code's renderer); the
extension draws the same snapshot from ``labextension/src/render.ts``.
"""
from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any, Final

from .chart import svg_chart
from .schema import RankSnapshot, RunErrorSnapshot, RunSnapshot
from .style import (DASH, ECHOES_FROM, KIND_LABELS, clip, colour, duration, exit_text, metrics_text, progress, rate,
                    status_label, tally, where)
from .report_text import profile_html
from .report_text import frame_line, has_places, stacks_title
from .trim import trim_snapshot
from .usage_words import data_line, input_bound, usage_cells, usage_columns
from .schema import GroupSnapshot, SummarySnapshot
from .style import tally_counts

__all__ = ["report_html", "html_of", "summary_html", "groups_html"]

_MONO: Final = "ui-monospace,SFMono-Regular,Menlo,Consolas,monospace"
_PRE: Final = (f"margin:0;padding:6px 8px;font-family:{_MONO};font-size:12px;line-height:1.4;"
               "border:1px solid #8883;border-radius:3px;background:#8881;overflow:auto;white-space:pre")
_TITLE: Final = "font-size:11px;font-weight:600;letter-spacing:.04em;text-transform:uppercase;color:#888"
_TH: Final = "text-align:left;padding:5px 10px;font-size:11px;color:#888;text-transform:uppercase;white-space:nowrap"
_TD: Final = "padding:4px 10px"  # the row draws the line above it, the table keeps cells on one line (a row per rank:
#                                   its bytes count in the report's budget)
_TR: Final = "border-top:1px solid #8883"
_BOX: Final = "border:1px solid #8884;border-radius:4px;padding:6px 10px 8px;min-width:0"
_BAD: Final = colour("failed")
_RIGHT: Final = {"Rank", "Rate", "Elapsed", "Exit", "CPU", "Mem", "GPU", "Input wait"}


def _columns(usage: list[str]) -> tuple[str, ...]:
    return ("Rank", "Host", "State", "Progress", "Rate", *usage, "Metrics", "Elapsed", "Exit", "Last output")


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def report_html(snapshot: Mapping[str, Any]) -> str:
    """A self-contained HTML report of any snapshot (trimmed first)."""
    return html_of(trim_snapshot(snapshot))


def html_of(snap: RunSnapshot) -> str:
    """The HTML of an already trimmed snapshot."""
    out = ['<div class="jupyter-torchdist-report" style="font-family:system-ui,-apple-system,Segoe UI,Roboto,'
           'sans-serif;font-size:13px;line-height:1.45;max-width:1100px">', _header(snap)]
    if snap["error"]:
        out.append(_error(snap["error"]))
    out.append(_panels(snap))
    out.append(profile_html(snap["profile"], _TH, _TD, _TR, _TITLE))
    if snap["summary"] is not None:
        out.append(summary_html(snap["summary"]))
    if snap["ranks"]:
        root = snap["error"]["rank"] if snap["error"] else None
        logged = [r for r in snap["ranks"] if r["state"] == "failed"][:3] if snap["summary"] else snap["ranks"]
        out += [_stacks(snap), _table(snap["ranks"], root), _logs(logged, root, open_=snap["error"] is not None)]
    return "".join(out) + "</div>"


def _header(snap: RunSnapshot) -> str:
    world = snap["world_size"]
    meta = ([snap["backend"]] if snap["backend"] else []) + [f"{world} rank{'s' if world != 1 else ''}",
                                                             duration(snap["elapsed_s"])]
    meta += [f"id {snap['id']}"] if snap.get("id") else []   # the run's durable id (run.id)
    out = (f'<div style="display:flex;flex-wrap:wrap;align-items:center;gap:10px"><span style="padding:2px 9px;'
           f'border-radius:10px;font-size:11px;font-weight:600;text-transform:uppercase;letter-spacing:.03em;'
           f'color:#fff;background:{colour(snap["status"])}">{_e(status_label(snap["status"]))}</span>'
           f'<code style="font-family:{_MONO};font-weight:600">{_e(snap["title"] or "%%distribute")}</code>'
           f'<span style="color:#888">{_e(" · ".join(meta))}</span></div>')
    if snap["headline"]:
        out += f'<div style="margin-top:4px">{_e(snap["headline"])}</div>'
    if snap["stall"]:
        out += (f'<div class="jtd-stall" style="margin-top:4px;padding:3px 8px;font-weight:600;border-left:3px solid '
                f'{_BAD};background:{_BAD}14">{_e(snap["stall"])}</div>')
    data = data_line(snap["data"])
    if data:
        out += f'<div class="jtd-data" style="margin-top:2px;font-size:12px">{_e(data)}</div>'
    for notice in snap["notices"]:
        out += (f'<div class="jtd-notice" style="margin-top:4px;padding:3px 8px;border-left:3px solid '
                f'{colour("stopped")};background:{colour("stopped")}14">{_e(notice)}</div>')
    if snap["ranks"] and snap["summary"] is None:  # a many-rank run's counts are its summary's
        out += f'<div style="margin-top:2px;color:#888;font-size:12px">ranks: {_e(tally(snap["ranks"]))}</div>'
    return out


def _error(error: RunErrorSnapshot) -> str:
    kind = KIND_LABELS.get(error["kind"], "failed")
    out = [f'<div style="margin-top:10px;padding:8px 12px;border:1px solid {_BAD}66;border-left:4px solid {_BAD};'
           f'border-radius:4px;background:{_BAD}0d"><div><strong>R{_e(where(error)[1:])}</strong> {_e(kind)}</div>'
           f'<div style="font-family:{_MONO};font-weight:600;color:{_BAD};margin:4px 0;white-space:pre-wrap">'
           f'{_e(error["summary"] or "failed")}</div>']
    if error["traceback"].strip():
        out.append(f'<pre style="{_PRE};max-height:22em">{_e(error["traceback"].rstrip())}</pre>')
    if len(error["secondary"]) >= ECHOES_FROM:
        out.append(groups_html("The other ranks' failures", error["echoes"]))
    n = len(error["secondary"])
    if n and len(error["secondary"]) < ECHOES_FROM:
        items = "".join(f'<li><strong>{_e(where(s))}</strong>: <span style="font-family:{_MONO};font-size:12px">'
                        f'{_e(s["summary"])}</span></li>' for s in error["secondary"])
        out.append(f'<details style="margin-top:6px"><summary style="cursor:pointer;color:#888">{n} other '
                   f'rank{"s" if n != 1 else ""} failed too (most likely as a consequence)</summary>'
                   f'<ul style="margin:4px 0;max-height:12em;overflow:auto">{items}</ul></details>')
    return "".join(out) + "</div>"


def _panels(snap: RunSnapshot) -> str:
    chart = svg_chart(snap["ranks"])
    value = snap["value_repr"]
    if value is None and not chart:
        return ""
    out = ['<div style="display:flex;flex-wrap:wrap;align-items:flex-start;gap:10px;margin-top:10px">']
    if value is not None:
        out.append(f'<div style="{_BOX};flex:1 1 300px"><div style="{_TITLE}">Value (rank 0)</div><pre '
                   f'style="{_PRE};max-height:12em;white-space:pre-wrap;margin-top:4px">{_e(value)}</pre></div>')
    if chart:
        out.append(f'<div style="{_BOX};flex:0 1 460px"><div style="{_TITLE}">Loss</div>{chart}</div>')
    return "".join(out) + "</div>"


def _bar(frac: float | None, c: str) -> str:
    if frac is None:
        return ""
    return (f'<span style="display:inline-block;vertical-align:middle;width:80px;height:6px;border-radius:3px;'
            f'background:#8883;margin-right:8px;overflow:hidden"><span style="display:block;height:100%;'
            f'width:{frac * 100:.1f}%;background:{c}"></span></span>')


def _usage_tds(r: RankSnapshot, usage: list[str]) -> str:
    out = []
    for name, text in zip(usage, usage_cells(r, usage)):
        warn = f";color:{colour('stopped')};font-weight:600" if name == "Input wait" and input_bound(r) else ""
        out.append(f'<td style="{_TD};text-align:right{warn}">{_e(text)}</td>')
    return "".join(out)


def _row(r: RankSnapshot, root: int | None, usage: list[str]) -> str:
    c = colour(r["state"])
    prog, frac = progress(r)
    note = r["error"] or r["last_line"]
    bg = f"background:{_BAD}0a;" if r["state"] == "failed" else ""
    edge = f"box-shadow:inset 3px 0 0 {_BAD};" if r["rank"] == root else ""
    mono = "font-family:monospace;font-size:12px"
    return (f'<tr style="{_TR};{bg}"><td style="{_TD};{edge}text-align:right;font-weight:600">{_e(r["rank"])}</td>'
            f'<td style="{_TD};{mono}">{_e(clip(r["host"], 32) or DASH)}</td>'
            f'<td style="{_TD};color:{c};font-weight:600">{_e(r["state"])}</td>'
            f'<td style="{_TD}">{_bar(frac, c)}<span style="font-size:11px;color:#888">{_e(prog)}</span></td>'
            f'<td style="{_TD};text-align:right">{_e(rate(r["rate"]))}</td>{_usage_tds(r, usage)}'
            f'<td style="{_TD};{mono}">{_e(metrics_text(r, 80) or DASH)}</td>'
            f'<td style="{_TD};text-align:right">{_e(duration(r["elapsed_s"]))}</td>'
            f'<td style="{_TD};text-align:right">{_e(exit_text(r))}</td>'
            f'<td style="{_TD};{mono};max-width:320px;overflow:hidden;text-overflow:ellipsis;'
            f'color:{_BAD if r["error"] else "#888"}" title="{_e(note)}">{_e(clip(note, 200))}</td></tr>')


def _table(ranks: list[RankSnapshot], root: int | None) -> str:
    usage = usage_columns(ranks)
    head = "".join(f'<th style="{_TH}{";text-align:right" if h in _RIGHT else ""}">{h}</th>' for h in _columns(usage))
    rows = "".join(_row(r, root, usage) for r in ranks)
    return (f'<div style="margin-top:10px;max-height:22em;overflow:auto;border:1px solid #8884;border-radius:4px">'
            f'<table style="border-collapse:collapse;width:100%;font-size:13px;font-variant-numeric:tabular-nums;'
            f'white-space:nowrap"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>')


def _rank_log(r: RankSnapshot, root: int | None) -> str:
    shown = len(r["log_tail"])
    count = (f"last {shown} of {r['log_lines']:,} lines" if r["log_lines"] > shown
             else f"{shown} line{'s' if shown != 1 else ''}")
    body = "\n".join(f'<span style="color:{_BAD}">{_e(t)}</span>' if s == "stderr" else _e(t)
                     for s, t in r["log_tail"])
    is_open = " open" if r["rank"] == root else ""
    host = f" · {_e(r['host'])}" if r["host"] else ""
    return (f'<details{is_open} style="margin:2px 0"><summary style="cursor:pointer">rank {_e(r["rank"])}{host} '
            f'<span style="color:#888">· {_e(r["state"])} · {count}</span></summary>'
            f'<pre style="{_PRE};max-height:16em">{body}</pre></details>')


def _logs(ranks: list[RankSnapshot], root: int | None, *, open_: bool) -> str:
    logs = [_rank_log(r, root) for r in ranks if r["log_tail"]]
    if not logs:
        return ""
    n = len(logs)
    return (f'<details style="margin-top:8px"{" open" if open_ else ""}><summary style="cursor:pointer;color:#888">'
            f'Logs ({n} rank{"s" if n != 1 else ""})</summary><div style="max-height:30em;overflow:auto;'
            f'padding-left:12px">{"".join(logs)}</div></details>')


def _stacks(snap: RunSnapshot) -> str:
    """Where each rank is (or was): its one-line place, then its stack, library frames folded."""
    if not has_places(snap["ranks"]):
        return ""
    items = []
    for r in snap["ranks"]:
        place = r["place"]
        if place:
            stack = "\n".join(frame_line(f) for f in place["frames"])
            items.append(f'<div style="margin:4px 0"><strong>rank {_e(r["rank"])}</strong>: <span style="font-family:'
                         f'{_MONO}">{_e(place["summary"])}</span>'
                         + (f'<pre style="{_PRE};max-height:12em;margin-top:2px">{_e(stack)}</pre>' if stack else "")
                         + "</div>")
    opened = " open" if snap["stall"] or snap["status"] in ("timeout", "interrupted") else ""
    return (f'<details class="jtd-stacks" style="margin-top:8px"{opened}><summary style="cursor:pointer;color:#888">'
            f'{_e(stacks_title(snap).capitalize())}</summary>{"".join(items)}</details>')


# -- a many-rank run's summary as HTML ---------------------------------------------------------------------------------
# A many-rank run's summary as self-contained HTML (the report's fallback, ``report_html``): counts by state, each
# measure's quantiles, the ranks worth a look and where the ranks wait, grouped. The extension draws the same from
# ``labextension/src/summary.ts``, with the paged table of every rank.
_QTH: Final = "text-align:right;padding:3px 8px;font-size:11px;color:#888;text-transform:uppercase"
_QTD: Final = "text-align:right;padding:2px 8px;border-top:1px solid #8883;font-variant-numeric:tabular-nums"


def _number(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def _quantiles(summary: SummarySnapshot) -> str:
    head = "".join(f'<th style="{_QTH}">{h}</th>' for h in ("", "min", "25%", "median", "75%", "max", "ranks"))
    rows = "".join(f'<tr><td style="{_QTD};text-align:left;font-weight:600">{_e(q["name"])}</td>'
                   + "".join(f'<td style="{_QTD}">{_e(_number(v))}</td>' for v in q["q"])
                   + f'<td style="{_QTD}">{q["n"]:,}</td></tr>' for q in summary["quantiles"])
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
