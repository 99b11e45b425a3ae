"""The run report as plain text: terminals, ``nbconvert --to script``, and ``repr`` of a report."""
from __future__ import annotations

import html
from collections.abc import Collection, Sequence
from collections.abc import Mapping
from typing import Any
from typing import Final

from .schema import RankSnapshot, RunErrorSnapshot, RunSnapshot
from .style import (DASH, ECHOES_FROM, KIND_LABELS, clip, duration, exit_text, metrics_text, progress, rate,
                    status_label, tally, tally_counts)
from .style import where as where_text
from .trim import trim_snapshot
from .usage_words import data_line, usage_cells, usage_columns
from .schema import FrameSnapshot
from .schema import ProfileSnapshot

__all__ = ["report_text", "text_of", "text_table", "frame_line", "place_lines", "stacks_title", "has_places",
           "profile_lines", "profile_html"]

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
    head += [f"id {snap['id']}"] if snap.get("id") else []   # the run's durable id (run.id)
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


# -- the one plain-text table ------------------------------------------------------------------------------------------
# The one plain-text table: the run report's ranks, a sweep's runs and ``runs()`` are all drawn with it.
def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Collection[int] = (),
               rule: bool = False, widest: int | None = None, free_last: bool = False) -> list[str]:
    """Aligned columns two spaces apart, one line per row after the header (and a rule under it with ``rule``).
    ``right``: the columns aligned right (numbers); ``widest``: cells cut to that many characters; ``free_last``:
    the last column neither padded nor counted in the widths (a free-text note)."""
    cut = [[cell[:widest] if widest else cell for cell in row] for row in [list(header), *map(list, rows)]]
    sized = len(header) - 1 if free_last else len(header)
    widths = [max(len(row[i]) for row in cut) for i in range(sized)]

    def line(row: Sequence[str]) -> str:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        return "  ".join(cells + list(row[sized:])).rstrip()

    out = [line(cut[0])]
    if rule:
        out.append(line(["-" * w for w in widths] + ["-" * len(h) for h in header[sized:]]))
    return out + [line(row) for row in cut[1:]]


# -- where each rank is, as text ---------------------------------------------------------------------------------------
# Where each rank is, as text: the lines the text report, the terminal view and the HTML fallback share.
#
# The live view's front end draws the same snapshot fields (``place``, ``stall``) in ``labextension/src/stacks.ts``.
_IN_FLIGHT: Final = ("starting", "running", "stopping")


def frame_line(f: FrameSnapshot) -> str:
    """One line of a stack: the user's frames with their code, library frames folded into a count."""
    if f["library"]:
        name = f" in {f['name']}" if f["name"] else ""
        return f"\u22ef {f['library']:,} library frame{'s' if f['library'] != 1 else ''} \u00b7 {f['where']}{name}"
    return f"{f['where']}  {f['code']}".rstrip()


def has_places(ranks: list[RankSnapshot]) -> bool:
    return any(r["place"] for r in ranks)


def stacks_title(snap: RunSnapshot | dict[str, Any]) -> str:
    return "where each rank is" if snap.get("status") in _IN_FLIGHT else "where each rank was"


def place_lines(ranks: list[RankSnapshot], *, frames: bool = True) -> list[str]:
    """For each rank with a place: "rank 0: waiting in all_reduce at cell line 4 for 15.2 s", then its stack."""
    out = []
    for r in ranks:
        place = r["place"]
        if not place:
            continue
        out.append(f"rank {r['rank']}: {place['summary']}")
        if frames:
            out += [f"    {frame_line(f)}" for f in place["frames"]]
    return out


# -- a --profile run's table -------------------------------------------------------------------------------------------
# A --profile run's table, for the text and HTML reports (the extension draws the same: ``profile.ts``): a row per
# rank with its window, its time per step and the shares of input, compute, communication and other.
_KINDS: Final = (("input", "input"), ("compute", "compute"), ("comm", "comm"), ("other", "other"))


def _window(first: int | None, last: int | None) -> str:
    return "-" if first is None or last is None else f"{first}-{last}"


def _cells(row: dict[str, object]) -> list[str]:
    step_s = row.get("step_s")
    cells = [str(row.get("rank")), _window(row.get("first"), row.get("last")),  # type: ignore[arg-type]
             "-" if not isinstance(step_s, (int, float)) else f"{step_s * 1000:.1f} ms"]
    cells += [f"{float(row.get(key) or 0.0):.0%}" for key, _ in _KINDS]  # type: ignore[arg-type]
    return cells + [str(row.get("note") or row.get("trace") or "")]


_HEAD: Final = ["rank", "steps", "step", *[title for _, title in _KINDS], "trace"]


def profile_lines(profile: ProfileSnapshot | None) -> list[str]:
    if not profile or not profile["ranks"]:
        return []
    rows = [_HEAD] + [_cells(dict(r)) for r in profile["ranks"]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_HEAD) - 1)]
    lines = ["", f"profile: {profile['verdict'] or 'no window closed'}"]
    lines += ["  " + "  ".join(c.rjust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1] for r in rows]
    return lines


def profile_html(profile: ProfileSnapshot | None, th: str, td: str, tr: str, title: str) -> str:
    if not profile or not profile["ranks"]:
        return ""
    e = html.escape
    head = "".join(f'<th style="{th}">{e(h)}</th>' for h in _HEAD)
    body = "".join(f'<tr style="{tr}">' + "".join(f'<td style="{td}">{e(c)}</td>' for c in _cells(dict(r)))
                   + "</tr>" for r in profile["ranks"])
    return (f'<div style="margin-top:10px"><div style="{title}">Profile: {e(profile["verdict"] or "")}</div>'
            f'<table style="border-collapse:collapse;margin-top:4px"><tr>{head}</tr>{body}</table></div>')
