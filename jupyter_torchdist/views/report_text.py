"""The run report as plain text: terminals, ``nbconvert --to script``, and ``repr`` of a report."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .schema import RankSnapshot, RunErrorSnapshot, RunSnapshot
from .style import (DASH, ECHOES_FROM, KIND_LABELS, clip, duration, exit_text, metrics_text, progress, rate,
                    status_label, tally, tally_counts)
from .style import where as where_text
from .places_text import has_places, place_lines, stacks_title
from .table import text_table
from .profile import profile_lines
from .trim import trim_snapshot
from .usage_words import data_line, usage_cells, usage_columns

__all__ = ["report_text", "text_of"]

_TB_LINES = 40
_VALUE_LINES = 20


def report_text(snapshot: Mapping[str, Any]) -> str:
    """A plain-text report: a summary line, the failure, the value and a per-rank table."""
    return text_of(trim_snapshot(snapshot))


def text_of(snap: RunSnapshot) -> str:
    """The text of an already trimmed snapshot."""
    lines = _head(snap)
    if snap["error"]:
        lines += _error(snap["error"], snap["ranks"])
    if snap["value_repr"] is not None:
        lines += _value(snap["value_repr"])
    if snap["ranks"]:
        lines += _table(snap["ranks"])
    lines += profile_lines(snap["profile"])
    if has_places(snap["ranks"]):
        lines += ["", f"{stacks_title(snap)}:"] + [f"  {line}" for line in place_lines(snap["ranks"])]
    return "\n".join(lines)


def _head(snap: RunSnapshot) -> list[str]:
    world = snap["world_size"]
    head = [snap["title"] or "%%distribute", status_label(snap["status"]).upper()]
    head += [snap["backend"]] if snap["backend"] else []
    head += [f"{world} rank{'s' if world != 1 else ''}", duration(snap["elapsed_s"])]
    lines = [" \u00b7 ".join(head)]
    lines += [snap["headline"]] if snap["headline"] else []
    lines += [snap["stall"]] if snap["stall"] else []
    data = data_line(snap["data"])
    lines += [data] if data else []
    lines += [f"note: {n}" for n in snap["notices"]]
    if snap["summary"] is not None:  # a many-rank run: its ranks by state, then only its featured ranks' rows
        lines += [f"ranks: {tally_counts(snap['summary']['counts'])}"]
        lines += [f"  {o['why']}: rank {o['rank']} on {o['host']}: {o['detail']}" for o in snap["summary"]["outliers"]]
    elif snap["ranks"]:
        lines += [f"ranks: {tally(snap['ranks'])}"]
    return lines


def _error(error: RunErrorSnapshot, ranks: list[RankSnapshot]) -> list[str]:
    kind = KIND_LABELS.get(error["kind"], "failed")
    lines = ["", f"ERROR: {where_text(error)} {kind}: {error['summary']}"]
    tb = error["traceback"].rstrip().splitlines()
    if len(tb) > _TB_LINES:
        tb = [f"... ({len(tb) - _TB_LINES} lines cut)"] + tb[-_TB_LINES:]
    lines += ["  " + t for t in tb]
    if len(error["secondary"]) >= ECHOES_FROM:
        lines += [f"  also failed: {g['ranks']:,} ranks ({', '.join(map(str, g['sample']))}, ...): {g['summary']}"
                  for g in error["echoes"]]
    else:
        lines += [f"  also failed: {where_text(s)}: {s['summary']}" for s in error["secondary"]]
    root = next((r for r in ranks if r["rank"] == error["rank"]), None)
    tail = root["log_tail"] if root else []
    if tail:
        lines.append(f"  last output of rank {error['rank']}:")
        lines += [f"  | {text}" for _, text in tail[-10:]]
    return lines


def _value(value_repr: str) -> list[str]:
    value = value_repr.splitlines() or [""]
    lines = ["", f"value (rank 0): {value[0]}"] + [f"  {v}" for v in value[1:_VALUE_LINES]]
    if len(value) > _VALUE_LINES:
        lines.append(f"  ... ({len(value) - _VALUE_LINES} more lines)")
    return lines


def _row(r: RankSnapshot, usage: list[str]) -> list[str]:
    prog, frac = progress(r)
    if frac is not None:
        prog = f"{prog} {frac * 100:3.0f}%"
    note = r["error"] or metrics_text(r) or r["last_line"]
    return [str(r["rank"]), clip(r["host"], 24) or DASH, r["state"], prog, rate(r["rate"]), *usage_cells(r, usage),
            duration(r["elapsed_s"]), exit_text(r), clip(" ".join(note.split()), 80)]


def _table(ranks: list[RankSnapshot]) -> list[str]:
    usage = usage_columns(ranks)
    header = ["rank", "host", "state", "progress", "rate", *(u.lower() for u in usage), "elapsed", "exit",
              "metrics / last output"]
    right = {0, 4, *range(5, 5 + len(usage) + 2)}
    return ["", *text_table(header, [_row(r, usage) for r in ranks], right=right, rule=True, free_last=True)]
