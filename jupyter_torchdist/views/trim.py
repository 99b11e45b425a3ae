"""One trimming pipeline: any snapshot in, a bounded, JSON-safe snapshot out (NaN-free, strings cut).

The live view and the saved report differ only in their ``Budget``: the live view is sent up to
ten times a second (about 110 KB for 64 ranks at most), the report once and kept in the notebook.
Input is never modified; malformed fields (a report edited by hand) become empty, not errors.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..core.brief import evenly
from .schema import (SCHEMA_VERSION, TABLE_COLUMNS, DataSnapshot, FrameSnapshot, GroupSnapshot, HostGroupSnapshot,
                     OutlierSnapshot, PlaceSnapshot, QuantileSnapshot, RankSnapshot, RunErrorSnapshot, RunSnapshot,
                     SecondarySnapshot, SummarySnapshot, TableSnapshot, UsageSnapshot)
from .schema import ProfileRankSnapshot, ProfileSnapshot
from .style import clip, clip_tail, finite

__all__ = ["Budget", "REPORT", "LIVE", "trim_snapshot"]

VALUE_CHARS: Final = 10_000
TRACEBACK_CHARS: Final = 20_000
SUMMARY_CHARS: Final = 2_000
SHORT_CHARS: Final = 300
SECONDARY_MAX: Final = 256
METRICS_MAX: Final = 32
NOTICES_MAX: Final = 16
GROUPS_MAX: Final = 12        # place and echo groups
HOSTS_MAX: Final = 256
OUTLIERS_MAX: Final = 16
QUANTILES_MAX: Final = 16
BAND_MAX: Final = 200
PROFILE_ROWS: Final = 1_024   # ranks in a --profile summary
TABLE_MAX: Final = 16_384     # rows of the compact rank table


@dataclass(frozen=True)
class Budget:
    log_lines: int         # log lines per rank
    log_chars: int         # log characters shared by all ranks (a failed rank gets 4 shares)
    log_min_chars: int     # a rank's share never drops below this
    line_chars: int        # longer log lines are cut
    curve_points: int      # loss-curve points shared by the ranks that have a curve
    curve_min: int         # ... never fewer than this per rank
    curve_max: int         # ... nor more
    last_line_chars: int   # the row's "latest output"
    stack_frames: int = 1_920  # lines of the ranks' stacks, shared by the ranks that have one (4 to 30 each)
    many_log_chars: int = 40_000  # a many-rank run (it has a summary): log characters of its featured ranks
    many_curve_max: int = 60      # ... and loss-curve points per featured rank (the band shows the rest)


REPORT: Final = Budget(log_lines=50, log_chars=120_000, log_min_chars=1_000, line_chars=500,
                       curve_points=3_200, curve_min=24, curve_max=200, last_line_chars=SHORT_CHARS)
LIVE: Final = Budget(log_lines=40, log_chars=48_000, log_min_chars=600, line_chars=500,
                     curve_points=1_600, curve_min=24, curve_max=200, last_line_chars=160, stack_frames=256,
                     many_log_chars=12_000, many_curve_max=40)


def _thin(points: Any, limit: int) -> list[list[float]]:
    """At most ``limit`` finite [x, y] points, evenly picked, the last one kept (it is the newest)."""
    if not isinstance(points, Sequence):
        return []
    clean = [[p[0], p[1]] for p in points
             if isinstance(p, Sequence) and len(p) >= 2 and finite(p[0]) is not None and finite(p[1]) is not None]
    return evenly(clean, limit)


def _log_tail(tail: Any, budget: Budget, chars: int) -> list[list[str]]:
    """The last lines of a rank's log within the budget's lines and ``chars`` characters (at least one)."""
    if not isinstance(tail, Sequence) or isinstance(tail, str):
        return []
    out: list[list[str]] = []
    used = 0
    for entry in reversed(tail[-budget.log_lines:]):
        if isinstance(entry, Sequence) and not isinstance(entry, str) and len(entry) >= 2:
            stream, text = ("stderr" if entry[0] == "stderr" else "stdout"), entry[1]
        else:
            stream, text = "stdout", entry
        line = clip(text, budget.line_chars)
        if out and used + len(line) > chars:
            break
        out.append([stream, line])
        used += len(line)
    out.reverse()
    return out


def _metric(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else str(value)
    return clip(value, 80)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _sequence(value: Any) -> Sequence[Any]:
    return value if isinstance(value, Sequence) and not isinstance(value, str) else []


def _int(value: Any) -> int | None:
    n = finite(value)
    return None if n is None else int(n)


def _trim_usage(u: Any) -> UsageSnapshot | None:
    if not isinstance(u, Mapping):
        return None
    share = finite(u.get("input_wait"))
    return {"cpu_pct": finite(u.get("cpu_pct")), "rss": _int(u.get("rss")), "gpu_util": finite(u.get("gpu_util")),
            "gpu_mem": _int(u.get("gpu_mem")), "input_wait": None if share is None else max(0.0, min(1.0, share)),
            "rows": _int(u.get("rows")) or 0, "rows_per_s": finite(u.get("rows_per_s"))}


def _trim_data(d: Any) -> DataSnapshot | None:
    if not isinstance(d, Mapping):
        return None
    return {"workers": _int(d.get("workers")) or 0, "active": _int(d.get("active")) or 0,
            "running": _int(d.get("running")) or 0,
            "rows": _int(d.get("rows")) or 0, "rows_per_s": finite(d.get("rows_per_s")),
            "seconds": finite(d.get("seconds"))}


def _trim_frame(f: Mapping[str, Any]) -> FrameSnapshot:
    return {"where": clip(f.get("where") or "", 120), "name": clip(f.get("name") or "", 80),
            "code": clip(f.get("code") or "", 200), "call": clip(f.get("call") or "", 80),
            "library": max(0, _int(f.get("library")) or 0)}


def _trim_place(p: Any, frames: int) -> PlaceSnapshot | None:
    """A rank's stack, its innermost ``frames`` lines (where it waits is what matters)."""
    if not isinstance(p, Mapping):
        return None
    kept = [_trim_frame(f) for f in list(_sequence(p.get("frames")))[-frames:] if isinstance(f, Mapping)]
    return {"summary": clip(p.get("summary") or "", SHORT_CHARS), "frames": kept, "age_s": finite(p.get("age_s"))}


def _trim_rank(r: Mapping[str, Any], budget: Budget, chars: int, points: int, frames: int = 30) -> RankSnapshot:
    metrics = _mapping(r.get("metrics"))
    error, tail = r.get("error"), r.get("log_tail")
    return {
        "rank": _int(r.get("rank")) or 0, "host": clip(r.get("host") or "", SHORT_CHARS),
        "state": clip(r.get("state") or "pending", 40),
        "step": _int(r.get("step")), "total": _int(r.get("total")), "rate": finite(r.get("rate")),
        "metrics": {clip(k, 40): _metric(v) for k, v in list(metrics.items())[:METRICS_MAX]},
        "last_line": clip(r.get("last_line") or "", budget.last_line_chars),
        "elapsed_s": finite(r.get("elapsed_s")), "exit_code": _int(r.get("exit_code")),
        "exit_signal": None if r.get("exit_signal") is None else clip(r.get("exit_signal"), 40),
        "error": None if error is None else clip(error, SUMMARY_CHARS),
        "log_lines": _int(r.get("log_lines")) or len(tail or ()),
        "log_dropped": _int(r.get("log_dropped")) or 0,
        "log_tail": _log_tail(tail, budget, chars),
        "loss_history": _thin(r.get("loss_history"), points),
        "usage": _trim_usage(r.get("usage")),
        "place": _trim_place(r.get("place"), frames),
        "paused": None if r.get("paused") is None else clip(r.get("paused"), 40),
    }


def _numbers(values: Any, n: int) -> list[float] | None:
    """``n`` finite numbers, or None."""
    seq = _sequence(values)
    out = [finite(v) for v in list(seq)[:n]]
    return [v for v in out if v is not None] if len(out) == n and None not in out else None


def _groups(items: Any) -> list[GroupSnapshot]:
    return [{"summary": clip(g.get("summary") or "", SHORT_CHARS), "ranks": _int(g.get("ranks")) or 0,
             "sample": [x for x in (_int(v) for v in list(_sequence(g.get("sample")))[:8]) if x is not None]}
            for g in list(_sequence(items))[:GROUPS_MAX] if isinstance(g, Mapping)]


def _counts(value: Any) -> dict[str, int]:
    return {clip(k, 40): _int(v) or 0 for k, v in list(_mapping(value).items())[:16]}


def _trim_summary(s: Any) -> SummarySnapshot | None:
    if not isinstance(s, Mapping):
        return None
    quantiles: list[QuantileSnapshot] = [
        {"name": clip(q.get("name") or "", 40), "q": qs, "n": _int(q.get("n")) or 0}
        for q in list(_sequence(s.get("quantiles")))[:QUANTILES_MAX]
        if isinstance(q, Mapping) and (qs := _numbers(q.get("q"), 5)) is not None]
    band = [p for p in (_numbers(p, 4) for p in list(_sequence(s.get("loss_band")))[-BAND_MAX:]) if p is not None]
    hosts: list[HostGroupSnapshot] = [
        {"host": clip(h.get("host") or "", 120), "ranks": _int(h.get("ranks")) or 0, "counts": _counts(h.get("counts")),
         "step": finite(h.get("step")), "rate": finite(h.get("rate"))}
        for h in list(_sequence(s.get("hosts")))[:HOSTS_MAX] if isinstance(h, Mapping)]
    outliers: list[OutlierSnapshot] = [
        {"rank": _int(o.get("rank")) or 0, "host": clip(o.get("host") or "", 120), "why": clip(o.get("why") or "", 40),
         "detail": clip(o.get("detail") or "", SHORT_CHARS)}
        for o in list(_sequence(s.get("outliers")))[:OUTLIERS_MAX] if isinstance(o, Mapping)]
    return {"counts": _counts(s.get("counts")), "quantiles": quantiles, "loss_band": band, "hosts": hosts,
            "outliers": outliers, "places": _groups(s.get("places"))}


def _table_row(row: Any, hosts: int, states: int) -> list[Any] | None:
    cells = list(_sequence(row))
    if len(cells) != len(TABLE_COLUMNS):
        return None
    rank, host, state = _int(cells[0]), _int(cells[1]), _int(cells[2])
    if rank is None or host is None or state is None or not (0 <= host < hosts and 0 <= state < states):
        return None
    return [rank, host, state, _int(cells[3]), finite(cells[4]), finite(cells[5])]


def _trim_table(t: Any) -> TableSnapshot | None:
    if not isinstance(t, Mapping):
        return None
    hosts = [clip(h, 120) for h in list(_sequence(t.get("hosts")))[:TABLE_MAX] if isinstance(h, str)]
    states = [clip(x, 40) for x in list(_sequence(t.get("states")))[:16] if isinstance(x, str)]
    rows = [r for r in (_table_row(x, len(hosts), len(states)) for x in list(_sequence(t.get("rows")))[:TABLE_MAX])
            if r is not None]
    return {"columns": list(TABLE_COLUMNS), "hosts": hosts, "states": states, "rows": rows}


def _trim_error(e: Any) -> RunErrorSnapshot | None:
    if not isinstance(e, Mapping):
        return None
    secondary: list[SecondarySnapshot] = [
        {"rank": _int(s.get("rank")), "host": clip(s.get("host") or "", SHORT_CHARS),
         "summary": clip(s.get("summary") or "", SHORT_CHARS)}
        for s in list(_sequence(e.get("secondary")))[:SECONDARY_MAX] if isinstance(s, Mapping)]
    return {
        "rank": _int(e.get("rank")), "host": clip(e.get("host") or "", SHORT_CHARS),
        "kind": clip(e.get("kind") or "", 40), "summary": clip(e.get("summary") or "", SUMMARY_CHARS),
        "traceback": clip_tail(e.get("traceback") or "", TRACEBACK_CHARS), "secondary": secondary,
        "echoes": _groups(e.get("echoes")),
    }


def _json_scalar(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [_json_scalar(v) for v in list(value)[:32]]
    return clip(value, SHORT_CHARS)


def _ranks(snapshot: Mapping[str, Any], budget: Budget) -> list[RankSnapshot]:
    ranks = [r for r in (snapshot.get("ranks") or []) if isinstance(r, Mapping)]
    many = isinstance(snapshot.get("summary"), Mapping)
    shares = sum(4 if r.get("state") == "failed" else 1 for r in ranks) or 1
    chars = budget.many_log_chars if many else budget.log_chars
    share = chars // shares if many else max(budget.log_min_chars, chars // shares)  # many: a hard budget
    curves = sum(1 for r in ranks if r.get("loss_history")) or 1
    points = min(budget.many_curve_max if many else budget.curve_max,
                 max(budget.curve_min, budget.curve_points // curves))
    stacks = sum(1 for r in ranks if isinstance(r.get("place"), Mapping)) or 1
    frames = min(30, max(4, budget.stack_frames // stacks))
    return [_trim_rank(r, budget, share * (4 if r.get("state") == "failed" else 1), points, frames) for r in ranks]


def trim_snapshot(snapshot: Mapping[str, Any], budget: Budget = REPORT) -> RunSnapshot:
    """A bounded copy of ``snapshot``: every unbounded field cut to ``budget``, only JSON-safe values."""
    options = _mapping(snapshot.get("options"))
    notices = _sequence(snapshot.get("notices"))
    value = snapshot.get("value_repr")
    ranks = _ranks(snapshot, budget)
    return {
        "version": _int(snapshot.get("version")) or SCHEMA_VERSION,
        "title": clip(snapshot.get("title") or "", SHORT_CHARS),
        "status": clip(snapshot.get("status") or "", 40),
        "headline": clip(snapshot.get("headline") or "", SUMMARY_CHARS),
        "backend": clip(snapshot.get("backend") or "", SHORT_CHARS),
        "options": {clip(k, 40): _json_scalar(v) for k, v in list(options.items())[:METRICS_MAX]},
        "world_size": _int(snapshot.get("world_size")) or len(ranks),
        "elapsed_s": finite(snapshot.get("elapsed_s")),
        "value_repr": None if value is None else clip(value, VALUE_CHARS),
        "error": _trim_error(snapshot.get("error")),
        "notices": [clip(n, SHORT_CHARS) for n in list(notices)[:NOTICES_MAX] if isinstance(n, str)],
        "data": _trim_data(snapshot.get("data")),
        "ranks": ranks,
        "stall": None if not snapshot.get("stall") else clip(snapshot.get("stall"), SUMMARY_CHARS),
        "run_id": _int(snapshot.get("run_id")), "background": snapshot.get("background") is True,
        "id": clip(snapshot["id"], 40) if isinstance(snapshot.get("id"), str) else None,
        "summary": _trim_summary(snapshot.get("summary")), "table": _trim_table(snapshot.get("table")),
        "profile": _trim_profile(snapshot.get("profile")),
    }


def _trim_profile(profile: Any) -> ProfileSnapshot | None:
    if not isinstance(profile, Mapping):
        return None
    rows: list[ProfileRankSnapshot] = []
    for row in list(_sequence(profile.get("ranks")))[:PROFILE_ROWS]:
        if not isinstance(row, Mapping):
            continue
        rows.append({"rank": _int(row.get("rank")) or 0, "first": _int(row.get("first")), "last": _int(row.get("last")),
                     "steps": _int(row.get("steps")) or 0, "step_s": finite(row.get("step_s")),
                     "input": finite(row.get("input")) or 0.0, "compute": finite(row.get("compute")) or 0.0,
                     "comm": finite(row.get("comm")) or 0.0, "other": finite(row.get("other")) or 0.0,
                     "trace": None if not row.get("trace") else clip(row.get("trace"), SHORT_CHARS),
                     "note": None if not row.get("note") else clip(row.get("note"), SHORT_CHARS)})
    folder, said = profile.get("folder"), profile.get("verdict")
    return {"folder": None if not folder else clip(folder, SHORT_CHARS), "ranks": rows,
            "verdict": None if not said else clip(said, SUMMARY_CHARS)}
