"""The saved run report: one snapshot as a MIME bundle every front end can draw.

``report_bundle`` gives three views of a ``RunState.snapshot()`` dict:

* ``application/vnd.jupyter-torchdist.run+json``: the snapshot itself, trimmed to a bounded size,
  drawn by the JupyterLab extension (``labextension/``);
* ``text/html``: a self-contained fallback (inline styles, every string escaped) for GitHub,
  nbviewer and anything without the extension;
* ``text/plain``: a table for terminals and ``nbconvert --to script/markdown``.

Pure Python: no IPython import, so it is cheap to import and test.
"""
from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "MIME_TYPE",
    "LOG_TAIL_LINES",
    "RunReport",
    "report_bundle",
    "report_html",
    "report_text",
    "trim_snapshot",
]

MIME_TYPE = "application/vnd.jupyter-torchdist.run+json"

LOG_TAIL_LINES = 50         # log lines kept per rank in a saved report
LOG_LINE_CHARS = 500        # longer log lines are cut
LOG_BUDGET_CHARS = 200_000  # log characters shared by all ranks (failed ranks get 4 shares)
LOG_MIN_CHARS = 2_000       # a rank's share never drops below this
VALUE_CHARS = 10_000
TRACEBACK_CHARS = 20_000
SUMMARY_CHARS = 2_000
SHORT_CHARS = 300
SECONDARY_MAX = 256
HISTORY_MAX = 200           # loss-curve points per rank
METRICS_MAX = 32

_STATUS_COLOURS = {
    "succeeded": "#2e7d32", "failed": "#c62828", "timeout": "#ef6c00", "interrupted": "#ef6c00",
    "running": "#1565c0", "starting": "#1565c0", "stopping": "#1565c0",
}
_STATE_COLOURS = {
    "done": "#2e7d32", "failed": "#c62828", "stopped": "#ef6c00",
    "running": "#1565c0", "starting": "#1565c0", "pending": "#757575",
}
_STATUS_LABELS = {"timeout": "timed out"}
_KIND_LABELS = {
    "exception": "raised an exception", "exit": "process exited",
    "lost": "lost by the launcher", "launch": "failed to launch",
}
_PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#eeca3b", "#9d755d")
_LOSS_KEYS = ("loss", "train_loss", "training_loss")
_DASH = "\u2014"
_MONO = "ui-monospace,SFMono-Regular,Menlo,Consolas,monospace"


# -- trimming -----------------------------------------------------------------------------------

def _clip(text: Any, limit: int) -> str:
    """``text`` as a string of at most about ``limit`` characters, the head kept."""
    s = "" if text is None else str(text)
    if len(s) <= limit:
        return s
    return f"{s[:limit]}\u2026 ({len(s) - limit:,} more characters)"


def _clip_tail(text: Any, limit: int) -> str:
    """``text`` with at most ``limit`` characters, the end kept (tracebacks end with the error)."""
    s = "" if text is None else str(text)
    if len(s) <= limit:
        return s
    return f"\u2026 ({len(s) - limit:,} characters cut)\n{s[-limit:]}"


def _finite(value: Any) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def _metric(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value if not isinstance(value, str) else _clip(value, 80)
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else str(value)
    return _clip(value, 80)


def _thin(points: Any, limit: int) -> list[list[float]]:
    """At most ``limit`` finite [x, y] points, evenly picked, the last one kept."""
    if not isinstance(points, Sequence):
        return []
    clean = [[p[0], p[1]] for p in points
             if isinstance(p, Sequence) and len(p) >= 2
             and _finite(p[0]) is not None and _finite(p[1]) is not None]
    if len(clean) <= limit:
        return clean
    stride = len(clean) / limit
    picked = [clean[int(i * stride)] for i in range(limit - 1)]
    picked.append(clean[-1])
    return picked


def _log_tail(tail: Any, budget: int) -> list[list[str]]:
    """The last lines of a rank's log within ``LOG_TAIL_LINES`` lines and ``budget`` characters."""
    if not isinstance(tail, Sequence) or isinstance(tail, str):
        return []
    out: list[list[str]] = []
    used = 0
    for entry in reversed(tail[-LOG_TAIL_LINES:]):
        if isinstance(entry, Sequence) and not isinstance(entry, str) and len(entry) >= 2:
            stream, text = ("stderr" if entry[0] == "stderr" else "stdout"), entry[1]
        else:
            stream, text = "stdout", entry
        line = _clip(text, LOG_LINE_CHARS)
        if out and used + len(line) > budget:
            break
        out.append([stream, line])
        used += len(line)
    out.reverse()
    return out


def _trim_rank(r: Mapping[str, Any], log_budget: int) -> dict[str, Any]:
    metrics = r.get("metrics") if isinstance(r.get("metrics"), Mapping) else {}
    error = r.get("error")
    log_lines = _finite(r.get("log_lines"))
    tail = r.get("log_tail")
    return {
        "rank": r.get("rank"),
        "host": _clip(r.get("host") or "", SHORT_CHARS),
        "state": _clip(r.get("state") or "pending", 40),
        "step": _finite(r.get("step")),
        "total": _finite(r.get("total")),
        "rate": _finite(r.get("rate")),
        "metrics": {_clip(k, 40): _metric(v) for k, v in list(metrics.items())[:METRICS_MAX]},
        "last_line": _clip(r.get("last_line") or "", SHORT_CHARS),
        "elapsed_s": _finite(r.get("elapsed_s")),
        "exit_code": _finite(r.get("exit_code")),
        "exit_signal": None if r.get("exit_signal") is None else _clip(r.get("exit_signal"), 40),
        "error": None if error is None else _clip(error, SUMMARY_CHARS),
        "log_lines": int(log_lines) if log_lines is not None else len(tail or ()),
        "log_tail": _log_tail(tail, log_budget),
        "loss_history": _thin(r.get("loss_history"), HISTORY_MAX),
    }


def _trim_error(e: Any) -> dict[str, Any] | None:
    if not isinstance(e, Mapping):
        return None
    secondary = e.get("secondary") if isinstance(e.get("secondary"), Sequence) else []
    return {
        "rank": e.get("rank"),
        "host": _clip(e.get("host") or "", SHORT_CHARS),
        "kind": _clip(e.get("kind") or "", 40),
        "summary": _clip(e.get("summary") or "", SUMMARY_CHARS),
        "traceback": _clip_tail(e.get("traceback") or "", TRACEBACK_CHARS),
        "secondary": [{"rank": s.get("rank"), "host": _clip(s.get("host") or "", SHORT_CHARS),
                       "summary": _clip(s.get("summary") or "", SHORT_CHARS)}
                      for s in list(secondary)[:SECONDARY_MAX] if isinstance(s, Mapping)],
    }


def _json_scalar(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return _clip(value, SHORT_CHARS) if isinstance(value, str) else value
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [_json_scalar(v) for v in list(value)[:32]]
    return _clip(value, SHORT_CHARS)


def trim_snapshot(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``snapshot`` with every unbounded field bounded (log tails, tracebacks,
    value repr, loss curves) and only JSON-safe values (no NaN). Input is not modified."""
    ranks = [r for r in (snapshot.get("ranks") or []) if isinstance(r, Mapping)]
    shares = sum(4 if r.get("state") == "failed" else 1 for r in ranks) or 1
    share = max(LOG_MIN_CHARS, LOG_BUDGET_CHARS // shares)
    options = snapshot.get("options") if isinstance(snapshot.get("options"), Mapping) else {}
    value = snapshot.get("value_repr")
    world = _finite(snapshot.get("world_size"))
    return {
        "version": snapshot.get("version", 1),
        "title": _clip(snapshot.get("title") or "", SHORT_CHARS),
        "status": _clip(snapshot.get("status") or "", 40),
        "headline": _clip(snapshot.get("headline") or "", SUMMARY_CHARS),
        "backend": _clip(snapshot.get("backend") or "", SHORT_CHARS),
        "options": {_clip(k, 40): _json_scalar(v) for k, v in list(options.items())[:METRICS_MAX]},
        "world_size": int(world) if world is not None else len(ranks),
        "elapsed_s": _finite(snapshot.get("elapsed_s")),
        "value_repr": None if value is None else _clip(value, VALUE_CHARS),
        "error": _trim_error(snapshot.get("error")),
        "ranks": [_trim_rank(r, share * (4 if r.get("state") == "failed" else 1)) for r in ranks],
    }


# -- formatting helpers -------------------------------------------------------------------------

def _duration(seconds: Any) -> str:
    s = _finite(seconds)
    if s is None or s < 0:
        return _DASH
    if s < 10:
        return f"{s:.2f} s"
    if s < 60:
        return f"{s:.1f} s"
    whole = round(s)
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


def _fmt_metric(value: Any) -> str:
    n = _finite(value)
    if n is None:
        return _clip(value, 40) if value is not None else _DASH
    if isinstance(n, int) or (float(n).is_integer() and abs(n) < 1e9):
        return str(int(n))
    a = abs(n)
    if a >= 1e5 or a < 1e-3:
        return f"{n:.2e}"
    return f"{n:.4g}"


def _rate(value: Any) -> str:
    n = _finite(value)
    if n is None:
        return _DASH
    return f"{n:.0f} it/s" if n >= 100 else f"{n:.1f} it/s" if n >= 10 else f"{n:.2f} it/s"


def _progress(r: Mapping[str, Any]) -> tuple[str, float | None]:
    step, total = _finite(r.get("step")), _finite(r.get("total"))
    if step is None:
        return _DASH, None
    if total:
        frac = max(0.0, min(1.0, step / total))
        return f"{int(step)}/{int(total)}", frac
    return f"step {int(step)}", None


def _exit(r: Mapping[str, Any]) -> str:
    if r.get("exit_signal"):
        return str(r["exit_signal"])
    code = _finite(r.get("exit_code"))
    return _DASH if code is None else str(int(code))


def _ordered_metrics(metrics: Any) -> list[tuple[str, Any]]:
    """Metric items with the loss first, then the rest in their given order."""
    if not isinstance(metrics, Mapping):
        return []

    def weight(key: str) -> int:
        return 0 if key in _LOSS_KEYS else 1 if key.endswith("loss") else 2

    return sorted(metrics.items(), key=lambda kv: weight(str(kv[0])))


def _metrics_text(r: Mapping[str, Any], limit: int = 60) -> str:
    metrics = _ordered_metrics(r.get("metrics"))
    return _clip(" ".join(f"{k}={_fmt_metric(v)}" for k, v in metrics), limit) if metrics else ""


def _status_label(status: str) -> str:
    return _STATUS_LABELS.get(status, status or "unknown")


def _ranks(snapshot: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [r for r in (snapshot.get("ranks") or []) if isinstance(r, Mapping)]


def _where(e: Mapping[str, Any]) -> str:
    rank = e.get("rank")
    host = e.get("host")
    return f"rank {'?' if rank is None else rank}" + (f" on {host}" if host else "")


def _tally(ranks: Iterable[Mapping[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for r in ranks:
        state = str(r.get("state") or "pending")
        counts[state] = counts.get(state, 0) + 1
    order = ["running", "starting", "pending", "done", "stopped", "failed"]
    keys = [k for k in order if k in counts] + [k for k in counts if k not in order]
    return ", ".join(f"{counts[k]} {k}" for k in keys)


# -- text ---------------------------------------------------------------------------------------

def report_text(snapshot: Mapping[str, Any]) -> str:
    """A plain-text report: a summary line, the failure, the value and a per-rank table."""
    return _text(trim_snapshot(snapshot))


def _text(snap: dict[str, Any]) -> str:
    ranks = snap["ranks"]
    status = str(snap["status"])
    head = [snap["title"] or "%%distribute", _status_label(status).upper()]
    if snap["backend"]:
        head.append(snap["backend"])
    head += [f"{snap['world_size']} rank{'s' if snap['world_size'] != 1 else ''}",
             _duration(snap["elapsed_s"])]
    lines = [" \u00b7 ".join(head)]
    if snap["headline"]:
        lines.append(snap["headline"])
    if ranks:
        lines.append(f"ranks: {_tally(ranks)}")

    error = snap["error"]
    if error:
        kind = _KIND_LABELS.get(error["kind"], "failed")
        lines += ["", f"ERROR: {_where(error)} {kind}: {error['summary']}"]
        tb = error["traceback"].rstrip().splitlines()
        if tb:
            if len(tb) > 40:
                tb = [f"... ({len(tb) - 40} lines cut)"] + tb[-40:]
            lines += ["  " + t for t in tb]
        for s in error["secondary"]:
            lines.append(f"  also failed: {_where(s)}: {s['summary']}")
        root = next((r for r in ranks if r.get("rank") == error.get("rank")), None)
        tail = (root or {}).get("log_tail") or []
        if tail:
            lines.append(f"  last output of rank {error.get('rank')}:")
            lines += [f"  | {text}" for _, text in tail[-10:]]

    if snap["value_repr"] is not None:
        value = snap["value_repr"].splitlines() or [""]
        lines += ["", f"value (rank 0): {value[0]}"] + [f"  {v}" for v in value[1:20]]
        if len(value) > 20:
            lines.append(f"  ... ({len(value) - 20} more lines)")

    if ranks:
        header = ["rank", "host", "state", "progress", "rate", "elapsed", "exit", "metrics / last output"]
        rows = []
        for r in ranks:
            prog, frac = _progress(r)
            if frac is not None:
                prog = f"{prog} {frac * 100:3.0f}%"
            note = r["error"] or _metrics_text(r) or r["last_line"]
            rows.append([str(r.get("rank")), _clip(r["host"], 24) or _DASH, r["state"], prog,
                         _rate(r["rate"]), _duration(r["elapsed_s"]), _exit(r),
                         _clip(" ".join(note.split()), 80)])
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
        right = {0, 4, 5, 6}

        def fmt(row: list[str]) -> str:
            cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
            return "  ".join(cells + [row[-1]]).rstrip()

        lines += ["", fmt(header), fmt(["-" * w for w in widths] + ["-" * len(header[-1])])]
        lines += [fmt(row) for row in rows]
    return "\n".join(lines)


# -- HTML ---------------------------------------------------------------------------------------

def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _pill(text: str, colour: str) -> str:
    return (f'<span style="display:inline-block;padding:0 7px;border-radius:9px;font-size:11px;'
            f'font-weight:600;line-height:17px;color:{colour};background:{colour}1f;'
            f'border:1px solid {colour}55">{_e(text)}</span>')


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


def _svg_chart(ranks: Sequence[Mapping[str, Any]]) -> str:
    series = [(r.get("rank"), r["loss_history"]) for r in ranks if r.get("loss_history")]
    if not series:
        return ""
    width, height, left, right, top, bottom = 440, 170, 50, 12, 10, 24
    xs = [p[0] for _, pts in series for p in pts]
    ys = [p[1] for _, pts in series for p in pts]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    if x1 == x0:
        x0, x1 = x0 - 0.5, x1 + 0.5
    y0, y1, step, decimals = _nice_ticks(y0, y1)

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * (width - left - right)

    def sy(y: float) -> float:
        return top + (1 - (y - y0) / (y1 - y0)) * (height - top - bottom)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'style="width:100%;max-width:{width}px;height:auto;display:block" role="img" '
             f'aria-label="loss per rank">']
    for i in range(round((y1 - y0) / step) + 1):
        v = y0 + i * step
        y = sy(v)
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="#8884" stroke-width="1"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 3.5:.1f}" text-anchor="end" font-size="10" '
                     f'fill="#888">{v:.{decimals}f}</text>')
    first, last = math.ceil(x0), math.floor(x1)
    parts.append(f'<text x="{sx(first):.1f}" y="{height - 6}" font-size="10" fill="#888">'
                 f'step {first}</text>')
    if last > first:
        parts.append(f'<text x="{sx(last):.1f}" y="{height - 6}" text-anchor="end" font-size="10" '
                     f'fill="#888">{last}</text>')
    many = len(series) > len(_PALETTE)
    for i, (rank, pts) in enumerate(series):
        idx = rank if many and isinstance(rank, int) else i
        colour = _PALETTE[idx % len(_PALETTE)]
        if len(pts) == 1:
            parts.append(f'<circle cx="{sx(pts[0][0]):.1f}" cy="{sy(pts[0][1]):.1f}" r="2.5" '
                         f'fill="{colour}"/>')
            continue
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="1.6" '
                     f'stroke-opacity="{0.55 if many else 0.95}"><title>rank {_e(rank)}</title>'
                     f'</polyline>')
    parts.append("</svg>")
    if many:
        legend = f"{len(series)} ranks"
    else:
        legend = " ".join(
            f'<span style="white-space:nowrap;margin-right:10px"><span style="display:inline-block;'
            f'width:12px;height:3px;vertical-align:middle;background:{_PALETTE[i % len(_PALETTE)]}">'
            f'</span> rank {_e(rank)}</span>' for i, (rank, _) in enumerate(series))
    parts.append(f'<div style="font-size:11px;color:#888">{legend}</div>')
    return "".join(parts)


_PRE = (f"margin:0;padding:6px 8px;font-family:{_MONO};font-size:12px;line-height:1.4;"
        "border:1px solid #8883;border-radius:3px;background:#8881;overflow:auto;white-space:pre")
_TITLE = "font-size:11px;font-weight:600;letter-spacing:.04em;text-transform:uppercase;color:#888"
_TH = "text-align:left;padding:5px 10px;font-size:11px;color:#888;text-transform:uppercase;white-space:nowrap"
_TD = "padding:4px 10px;border-top:1px solid #8883;white-space:nowrap"


def report_html(snapshot: Mapping[str, Any]) -> str:
    """A self-contained HTML report: inline styles only, no scripts, every string escaped."""
    return _html(trim_snapshot(snapshot))


def _html(snap: dict[str, Any]) -> str:
    ranks = snap["ranks"]
    status = str(snap["status"])
    colour = _STATUS_COLOURS.get(status, "#757575")
    out: list[str] = ['<div class="jupyter-torchdist-report" style="font-family:system-ui,-apple-system,'
                      'Segoe UI,Roboto,sans-serif;font-size:13px;line-height:1.45;max-width:1100px">']

    meta = [snap["backend"]] if snap["backend"] else []
    meta += [f"{snap['world_size']} rank{'s' if snap['world_size'] != 1 else ''}", _duration(snap["elapsed_s"])]
    out.append(
        f'<div style="display:flex;flex-wrap:wrap;align-items:center;gap:10px">'
        f'<span style="padding:2px 9px;border-radius:10px;font-size:11px;font-weight:600;'
        f'text-transform:uppercase;letter-spacing:.03em;color:#fff;background:{colour}">'
        f'{_e(_status_label(status))}</span>'
        f'<code style="font-family:{_MONO};font-weight:600">{_e(snap["title"] or "%%distribute")}</code>'
        f'<span style="color:#888">{_e(" · ".join(meta))}</span></div>')
    if snap["headline"]:
        out.append(f'<div style="margin-top:4px">{_e(snap["headline"])}</div>')
    if ranks:
        out.append(f'<div style="margin-top:2px;color:#888;font-size:12px">ranks: {_e(_tally(ranks))}</div>')

    error = snap["error"]
    if error:
        kind = _KIND_LABELS.get(error["kind"], "failed")
        out.append('<div style="margin-top:10px;padding:8px 12px;border:1px solid #c6282866;'
                   'border-left:4px solid #c62828;border-radius:4px;background:#c628280d">')
        out.append(f'<div><strong>R{_e(_where(error)[1:])}</strong> {_e(kind)}</div>')
        out.append(f'<div style="font-family:{_MONO};font-weight:600;color:#c62828;margin:4px 0;'
                   f'white-space:pre-wrap">{_e(error["summary"] or "failed")}</div>')
        if error["traceback"].strip():
            out.append(f'<pre style="{_PRE};max-height:22em">{_e(error["traceback"].rstrip())}</pre>')
        if error["secondary"]:
            n = len(error["secondary"])
            items = "".join(f'<li><strong>{_e(_where(s))}</strong>: '
                            f'<span style="font-family:{_MONO};font-size:12px">{_e(s["summary"])}</span></li>'
                            for s in error["secondary"])
            out.append(f'<details style="margin-top:6px"><summary style="cursor:pointer;color:#888">'
                       f'{n} other rank{"s" if n != 1 else ""} failed too (most likely as a consequence)'
                       f'</summary><ul style="margin:4px 0;max-height:12em;overflow:auto">{items}</ul></details>')
        out.append("</div>")

    chart = _svg_chart(ranks)
    if snap["value_repr"] is not None or chart:
        out.append('<div style="display:flex;flex-wrap:wrap;align-items:flex-start;gap:10px;margin-top:10px">')
        box = "border:1px solid #8884;border-radius:4px;padding:6px 10px 8px;min-width:0"
        if snap["value_repr"] is not None:
            out.append(f'<div style="{box};flex:1 1 300px"><div style="{_TITLE}">Value (rank 0)</div>'
                       f'<pre style="{_PRE};max-height:12em;white-space:pre-wrap;margin-top:4px">'
                       f'{_e(snap["value_repr"])}</pre></div>')
        if chart:
            out.append(f'<div style="{box};flex:0 1 460px"><div style="{_TITLE}">Loss</div>{chart}</div>')
        out.append("</div>")

    if ranks:
        root = error.get("rank") if error else None
        head = "".join(f'<th style="{_TH}{";text-align:right" if h in ("Rank", "Rate", "Elapsed", "Exit") else ""}">'
                       f'{h}</th>' for h in ("Rank", "Host", "State", "Progress", "Rate", "Metrics",
                                             "Elapsed", "Exit", "Last output"))
        rows = []
        for r in ranks:
            state = r["state"]
            sc = _STATE_COLOURS.get(state, "#757575")
            prog, frac = _progress(r)
            bar = ""
            if frac is not None:
                bar = (f'<span style="display:inline-block;vertical-align:middle;width:80px;height:6px;'
                       f'border-radius:3px;background:#8883;margin-right:8px;overflow:hidden">'
                       f'<span style="display:block;height:100%;width:{frac * 100:.1f}%;background:{sc}">'
                       f'</span></span>')
            note = r["error"] or r["last_line"]
            bg = "background:#c628280a;" if state == "failed" else ""
            edge = "box-shadow:inset 3px 0 0 #c62828;" if root is not None and r.get("rank") == root else ""
            rows.append(
                f'<tr style="{bg}">'
                f'<td style="{_TD};{edge}text-align:right;font-weight:600">{_e(r.get("rank"))}</td>'
                f'<td style="{_TD};font-family:{_MONO};font-size:12px">{_e(_clip(r["host"], 32) or _DASH)}</td>'
                f'<td style="{_TD}">{_pill(state, sc)}</td>'
                f'<td style="{_TD}">{bar}<span style="font-size:11px;color:#888">{_e(prog)}</span></td>'
                f'<td style="{_TD};text-align:right">{_e(_rate(r["rate"]))}</td>'
                f'<td style="{_TD};font-family:{_MONO};font-size:12px">{_e(_metrics_text(r, 80) or _DASH)}</td>'
                f'<td style="{_TD};text-align:right">{_e(_duration(r["elapsed_s"]))}</td>'
                f'<td style="{_TD};text-align:right">{_e(_exit(r))}</td>'
                f'<td style="{_TD};font-family:{_MONO};font-size:12px;max-width:320px;overflow:hidden;'
                f'text-overflow:ellipsis;color:{"#c62828" if r["error"] else "#888"}" title="{_e(note)}">'
                f'{_e(_clip(note, 200))}</td></tr>')
        out.append(f'<div style="margin-top:10px;max-height:22em;overflow:auto;border:1px solid #8884;'
                   f'border-radius:4px"><table style="border-collapse:collapse;width:100%;font-size:13px;'
                   f'font-variant-numeric:tabular-nums"><thead><tr>{head}</tr></thead>'
                   f'<tbody>{"".join(rows)}</tbody></table></div>')

        logs = []
        for r in ranks:
            if not r["log_tail"]:
                continue
            shown = len(r["log_tail"])
            count = (f"last {shown} of {r['log_lines']:,} lines" if r["log_lines"] > shown
                     else f"{shown} line{'s' if shown != 1 else ''}")
            body = "\n".join(f'<span style="color:#c62828">{_e(t)}</span>' if s == "stderr" else _e(t)
                             for s, t in r["log_tail"])
            is_open = " open" if root is not None and r.get("rank") == root else ""
            logs.append(f'<details{is_open} style="margin:2px 0"><summary style="cursor:pointer">'
                        f'rank {_e(r.get("rank"))}{" · " + _e(r["host"]) if r["host"] else ""} '
                        f'<span style="color:#888">· {_e(r["state"])} · {count}</span></summary>'
                        f'<pre style="{_PRE};max-height:16em">{body}</pre></details>')
        if logs:
            out.append(f'<details style="margin-top:8px"{" open" if error else ""}><summary style="cursor:pointer;'
                       f'color:#888">Logs ({len(logs)} rank{"s" if len(logs) != 1 else ""})</summary>'
                       f'<div style="max-height:30em;overflow:auto;padding-left:12px">{"".join(logs)}</div>'
                       f'</details>')
    out.append("</div>")
    return "".join(out)


# -- bundle -------------------------------------------------------------------------------------

def report_bundle(snapshot: Mapping[str, Any]) -> dict[str, object]:
    """``{MIME_TYPE: trimmed snapshot, "text/html": ..., "text/plain": ...}`` for ``display``."""
    trimmed = trim_snapshot(snapshot)
    return {MIME_TYPE: trimmed, "text/html": _html(trimmed), "text/plain": _text(trimmed)}


class RunReport:
    """A run snapshot that displays itself: ``IPython.display.display(RunReport(snap))``."""

    def __init__(self, snapshot: Mapping[str, Any]) -> None:
        self.snapshot: dict[str, Any] = dict(snapshot)

    def _repr_mimebundle_(self, include: Iterable[str] | None = None,
                          exclude: Iterable[str] | None = None) -> dict[str, object]:
        bundle = report_bundle(self.snapshot)
        if include:
            wanted = set(include)
            bundle = {k: v for k, v in bundle.items() if k in wanted}
        if exclude:
            unwanted = set(exclude)
            bundle = {k: v for k, v in bundle.items() if k not in unwanted}
        return bundle

    def __repr__(self) -> str:
        return report_text(self.snapshot)
