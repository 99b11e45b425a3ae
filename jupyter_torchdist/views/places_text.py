"""Where each rank is, as text: the lines the text report, the terminal view and the HTML fallback share.

The live view's front end draws the same snapshot fields (``place``, ``stall``) in ``labextension/src/stacks.ts``.
"""
from __future__ import annotations

from typing import Any, Final

from .schema import FrameSnapshot, RankSnapshot, RunSnapshot

__all__ = ["frame_line", "place_lines", "stacks_title", "has_places"]

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
