"""The live view in Jupyter front ends, from stock ipywidgets: it only draws snapshots.

Interaction that must work while the cell runs (choosing which rank's log to read) is linked in
the front end (``jslink``), because the kernel is busy until the run ends. When the run ends the
widget is replaced, in place, by the run report, which needs no kernel to show again later.
"""
from __future__ import annotations

import html
from typing import Any

import ipywidgets as W
from IPython.display import display

from ..run_report import RunReport

__all__ = ["WidgetView", "table_html", "log_html"]

COLORS = {"pending": "#9e9e9e", "starting": "#1e88e5", "running": "#1e88e5", "done": "#2e7d32",
          "failed": "#c62828", "stopped": "#ef6c00", "succeeded": "#2e7d32", "timeout": "#c62828",
          "interrupted": "#ef6c00", "stopping": "#ef6c00"}
_E = html.escape


def _badge(state: str) -> str:
    color = COLORS.get(state, "#616161")
    return (f'<span style="background:{color};color:#fff;border-radius:3px;padding:0 6px;'
            f'font-size:11px">{_E(state)}</span>')


def _bar(r: dict[str, Any]) -> str:
    step, total = r.get("step"), r.get("total")
    if step is None:
        return ""
    frac = min(1.0, step / total) if total else 0.0
    width = f"{frac * 100:.1f}%" if total else "0%"
    label = f"{step}/{total}" if total else f"{step}"
    color = COLORS.get(r["state"], "#1e88e5")
    return (f'<div style="display:flex;align-items:center;gap:6px"><div style="flex:1;min-width:80px;'
            f'height:8px;background:#e0e0e0;border-radius:4px"><div class="jtd-bar" style="width:{width};'
            f'height:8px;background:{color};border-radius:4px"></div></div>'
            f'<span style="font-variant-numeric:tabular-nums">{_E(label)}</span></div>')


def _metrics(metrics: dict[str, Any]) -> str:
    return " ".join(f"{_E(str(k))}={_E(f'{v:.4g}' if isinstance(v, float) else str(v))}"
                    for k, v in list(metrics.items())[:6])


def table_html(snap: dict[str, Any]) -> str:
    """The per-rank grid; a fixed max height so 64 ranks scroll instead of flooding the page."""
    rows = []
    for r in snap["ranks"]:
        rate = f"{r['rate']:.2f}/s" if r.get("rate") else ""
        last = r.get("error") or r.get("last_line") or ""
        rows.append(
            f'<tr class="jtd-rank" data-rank="{r["rank"]}" data-state="{_E(r["state"])}">'
            f'<td>{r["rank"]}</td><td>{_E(r.get("host") or "")}</td><td>{_badge(r["state"])}</td>'
            f'<td style="min-width:160px">{_bar(r)}</td><td>{rate}</td><td>{_metrics(r["metrics"])}</td>'
            f'<td style="max-width:360px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;'
            f'font-family:monospace" title="{_E(last)}">{_E(last)}</td></tr>')
    head = "".join(f"<th style='text-align:left;padding-right:10px'>{h}</th>"
                   for h in ("rank", "host", "state", "progress", "rate", "metrics", "latest output"))
    return (f'<div style="max-height:360px;overflow:auto"><table class="jtd-table" style="border-collapse:'
            f'collapse;font-size:12px;width:100%"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
            f'</tbody></table></div>')


def header_html(snap: dict[str, Any]) -> str:
    return (f'<div class="jtd-header" style="font-size:13px"><b>{_E(snap.get("title") or "distribute")}</b> '
            f'{_badge(snap["status"])} <span style="color:#616161">{snap["world_size"]} ranks · '
            f'{_E(snap.get("backend") or "")} · {snap["elapsed_s"]:.1f} s</span></div>')


def log_html(r: dict[str, Any]) -> str:
    lines = "\n".join(
        (f'<span style="color:#c62828">{_E(t)}</span>' if s == "stderr" else _E(t)) for s, t in r["log_tail"])
    more = r["log_lines"] - len(r["log_tail"])
    note = f'<div style="color:#757575">… {more} earlier lines (all of them: jupyter_torchdist.last_run().logs[{r["rank"]}])</div>' if more > 0 else ""
    return (f'{note}<pre class="jtd-log" style="max-height:240px;overflow:auto;margin:0;font-size:11px;'
            f'background:#fafafa;padding:4px">{lines or "(no output yet)"}</pre>')


class WidgetView:
    log_tail = 200

    def __init__(self) -> None:
        self.header = W.HTML()
        self.table = W.HTML()
        self.logs: list[W.HTML] = []
        self.picker = W.Dropdown(description="log of", layout=W.Layout(width="160px"))
        self.stack = W.Stack()
        self.box = W.VBox([self.header, self.table, W.HBox([self.picker]), self.stack])
        self._log_counts: dict[int, int] = {}
        self._handle: Any = None

    def start(self, snapshot: dict[str, Any]) -> None:
        n = snapshot["world_size"]
        self.logs = [W.HTML() for _ in range(n)]
        self.stack.children = self.logs
        self.picker.options = [(f"rank {r}", r) for r in range(n)]
        self.picker.value = 0
        self.stack.selected_index = 0
        self._link = W.jslink((self.picker, "index"), (self.stack, "selected_index"))
        self.update(snapshot)
        self._handle = display(self.box, display_id=True)

    def update(self, snapshot: dict[str, Any]) -> None:
        self.header.value = header_html(snapshot)
        self.table.value = table_html(snapshot)
        for r in snapshot["ranks"]:
            if self._log_counts.get(r["rank"]) != r["log_lines"]:
                self._log_counts[r["rank"]] = r["log_lines"]
                self.logs[r["rank"]].value = log_html(r)

    def finish(self, snapshot: dict[str, Any]) -> None:
        self.update(snapshot)
        if self._handle is not None:
            self._handle.update(RunReport(snapshot))
        for w in [self._link, self.header, self.table, self.picker, self.stack, self.box, *self.logs]:
            w.close()
