"""Where each rank is, as the kernel knows it: pure, no I/O, no clock (every time is given).

Two sources, both from the rank: its usage reading names, once a second, the collective its main thread is in
(so the stall rule needs no stack), and a ``PLACE`` answers the kernel's ``WHERE`` with the whole stack (the
live view's Stacks, a stall, an interrupt, ``--timeout``). A ``PDB`` prompt marks the rank paused until the
kernel answers it. ``describe`` says it in one line, the way the error and the views put it:
"waiting in all_reduce at cell line 4 for 15.2 s", "in time.sleep at cell line 6", "paused in pdb at cell line 5".
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from ...core import contract as C
from ...core.brief import group_texts
from ...views.schema import FrameSnapshot, PlaceSnapshot

__all__ = ["RankDebug", "fold_collective", "fold_place", "fold_pdb", "describe", "place_snapshot", "user_frames",
           "grouped_where_lines",
           "where_lines", "FRAMES_KEPT", "RankLike"]

FRAMES_KEPT: Final = 40     # entries of a stack the kernel keeps (the rank sends at most 30)
ANSWER_S: Final = 1.0       # a rank asked where it is has this long to answer before it "did not say"
_TEXT: Final = 200


@dataclass
class RankDebug:
    collective: str | None = None          # from the latest usage reading
    collective_since: float | None = None  # ... when it entered it (the kernel's clock)
    frames: list[FrameSnapshot] | None = None  # the latest PLACE's stack, outermost first
    place_collective: str | None = None    # ... the collective it named, and how long it had waited then
    place_waited: float | None = None
    place_at: float | None = None          # when that PLACE arrived
    asked_at: float | None = None          # when the kernel last sent WHERE (a later PLACE answers it)
    paused: str | None = None              # "pdb" or "post-mortem" while a prompt waits for the user

    def answered(self) -> bool:
        return self.asked_at is not None and self.place_at is not None and self.place_at >= self.asked_at


class RankLike(Protocol):
    """What the debugging rules read of a rank (``rank_state.RankState``, which holds a ``RankDebug``)."""

    @property
    def rank(self) -> int: ...
    @property
    def state(self) -> str: ...
    @property
    def debug(self) -> RankDebug: ...


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return max(0.0, float(value))


def _text(value: Any, limit: int = _TEXT) -> str:
    return value[:limit] if isinstance(value, str) else ""


def fold_collective(d: RankDebug, msg: C.UsageMsg, at: float) -> None:
    """Each usage reading says whether the rank is in a collective now (no field: it is not)."""
    name, waited = msg.get("collective"), _seconds(msg.get("collective_s"))
    if not isinstance(name, str) or waited is None:
        d.collective = d.collective_since = None
        return
    since = at - waited
    if d.collective != name or d.collective_since is None or abs(d.collective_since - since) > 2.0:
        d.collective, d.collective_since = name[:80], since  # a new call (the same one drifts by jitter only)


def _frame(raw: Any) -> FrameSnapshot | None:
    if not isinstance(raw, dict):
        return None
    library = raw.get("library")
    return {"where": _text(raw.get("where"), 120), "name": _text(raw.get("name"), 80), "code": _text(raw.get("code")),
            "call": _text(raw.get("call"), 80),
            "library": library if isinstance(library, int) and not isinstance(library, bool) and library > 0 else 0}


def fold_place(d: RankDebug, msg: C.PlaceMsg, at: float) -> None:
    raw = msg.get("frames")
    frames = [f for f in (_frame(x) for x in (raw if isinstance(raw, list) else [])[-FRAMES_KEPT:]) if f is not None]
    name = msg.get("collective")
    d.frames, d.place_at = frames, at
    d.place_collective = name[:80] if isinstance(name, str) else None
    d.place_waited = _seconds(msg.get("waited_s")) if d.place_collective else None


def fold_pdb(d: RankDebug, msg: C.PdbMsg) -> None:
    """A prompt pauses the rank until answered (``answered_prompt``); its end or quit unpauses it."""
    kind = msg.get("kind")
    if kind == "prompt":
        d.paused = "post-mortem" if msg.get("post_mortem") else "pdb"
    elif kind in ("end", "quit"):
        d.paused = None


def user_frames(frames: list[FrameSnapshot]) -> list[FrameSnapshot]:
    return [f for f in frames if not f["library"]]


def _innermost(frames: list[FrameSnapshot]) -> FrameSnapshot | None:
    users = user_frames(frames)
    return users[-1] if users else (frames[-1] if frames else None)


def describe(d: RankDebug, state: str) -> str | None:
    """One line for where the rank is (its latest PLACE), or None when it never said."""
    if state in ("done", "failed"):
        return "done: its cell had ended" if state == "done" else "failed (see its error)"
    frames = d.frames or []
    in_pdb = bool(frames) and frames[-1]["library"] > 0 and frames[-1]["name"] == "pdb_reply"  # rank/link.py's wait
    if d.paused is not None or in_pdb:
        inner = _innermost(frames)
        where = f" at {inner['where']}" if inner else ""
        return f"paused in {'a post-mortem' if d.paused == 'post-mortem' else 'pdb'}{where}"
    if d.frames is None:
        return None
    inner = _innermost(d.frames)
    at = f" at {inner['where']}" if inner else ""
    if d.place_collective:
        waited = f" for {d.place_waited:.1f} s" if d.place_waited is not None else ""
        return f"waiting in {d.place_collective}{at}{waited}"
    if inner is not None and inner["call"]:
        return f"in {inner['call']}{at}"
    return f"running{at}" if at else "running"


_SILENT: Final = "did not say (no answer when asked: it may hold the GIL in native code, or its process is gone)"


def place_snapshot(d: RankDebug, state: str, now: float) -> PlaceSnapshot | None:
    """The rank's place for the views, once it answered (or is paused in pdb, or was asked a second ago and did not
    answer); None before."""
    if d.frames is None and d.paused is None and (d.asked_at is None or now - d.asked_at < ANSWER_S):
        return None
    summary = describe(d, state) or _SILENT
    age = None if d.place_at is None else round(max(0.0, now - d.place_at), 1)
    return {"summary": summary, "frames": list(d.frames or []), "age_s": age}


def _unsaid(r: RankLike) -> str:
    """What a rank that never said where it was is said to be doing."""
    if r.state == "pending":
        return "never started"
    joining = r.state == "starting" and r.debug.asked_at is None  # not asked: the group was still forming
    return "starting: had not joined the group yet" if joining else _SILENT


def where_lines(ranks: Sequence[RankLike], frames: int = 3) -> list[str]:
    """Each rank's place as the error says it: its line, then its innermost user frames with their code."""
    lines = []
    for r in ranks:
        said = describe(r.debug, r.state) or _unsaid(r)
        lines.append(f"  rank {r.rank}: {said}")
        if r.state not in ("done", "failed"):
            lines += [f"      {f['where']}: {f['code']}" for f in user_frames(r.debug.frames or [])[-frames:]]
    return lines


def grouped_where_lines(ranks: Sequence[RankLike], frames: int = 3) -> list[str]:
    """``where_lines`` for many ranks: the ranks grouped by what they say, counted, with one rank's frames each."""
    said = [(r.rank, describe(r.debug, r.state) or _unsaid(r))
            for r in ranks]
    by_rank = {r.rank: r for r in ranks}
    lines = []
    for g in group_texts(said):
        first = by_rank[g["sample"][0]]
        named = ", ".join(map(str, g["sample"])) + (", ..." if g["ranks"] > len(g["sample"]) else "")
        lines.append(f"  {g['ranks']:,} rank{'s' if g['ranks'] != 1 else ''} ({named}): {g['summary']}")
        if first.state not in ("done", "failed"):
            lines += [f"      {f['where']}: {f['code']}" for f in user_frames(first.debug.frames or [])[-frames:]]
    return lines
