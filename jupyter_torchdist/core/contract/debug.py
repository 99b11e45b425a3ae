"""Debugging over the channel, in both directions: where each rank is (its stack, its collective) and pdb.

* ``WHERE`` (kernel -> rank) asks a rank for its main thread's stack; the rank's reader thread answers with a
  ``PLACE`` at once, whatever its main thread is doing (blocked in a collective, sleeping, in pdb).
* ``PDB`` (rank -> kernel) is the rank's debugger speaking: a prompt (with what pdb printed before it), an
  offer of a post-mortem (``--pdb``: the cell raised here), the end of a post-mortem, or the user's quit.
  ``PDB_REPLY`` (kernel -> rank) carries the user's line back (``None``: no more input).
* ``WHERE_WANTED`` is said by the kernel's own side (rank -1): the user asked the live view for the stacks.
"""
from __future__ import annotations

from typing import Final, Literal, TypedDict

__all__ = ["PLACE", "PDB", "WHERE", "PDB_REPLY", "WHERE_WANTED", "FrameInfo", "PlaceMsg", "PdbMsg", "WhereMsg",
           "PdbReplyMsg", "WhereWantedMsg", "PdbKind"]

PLACE: Final = "place"                # rank: where my main thread is (asked for by WHERE)
PDB: Final = "pdb"                    # rank: my debugger's prompt, post-mortem offer, end, or quit
WHERE: Final = "where"                # kernel -> rank: send a PLACE now
PDB_REPLY: Final = "pdb_reply"        # kernel -> rank: the user's line for the debugger
WHERE_WANTED: Final = "where_wanted"  # the kernel's own side (rank -1): the user asked for every rank's stack

PdbKind = Literal["prompt", "offer", "end", "quit"]


class FrameInfo(TypedDict):
    """One line of a rank's stack, outermost first. Library frames in a row are folded into one entry."""
    where: str      # "cell line 4", "train.py line 12"; for folded frames the innermost one's module
    name: str       # the function ("<cell>" for the cell's own code)
    code: str       # the source line, stripped ("" when unknown)
    call: str       # what the line is calling at this moment ("dist.all_reduce", "time.sleep"), when known
    library: int    # 0: the user's code; n > 0: n library frames (Python's, torch's, ours) folded into this entry


class PlaceMsg(TypedDict):
    t: Literal["place"]
    frames: list[FrameInfo]
    collective: str | None    # the torch.distributed call the main thread is in, if any
    waited_s: float | None    # ... and for how long, by the rank's own clock
    at: float


class _Pdb(TypedDict):
    t: Literal["pdb"]
    kind: PdbKind
    text: str           # prompt: what pdb printed since the last prompt; offer: the exception's summary
    at: float


class PdbMsg(_Pdb, total=False):
    prompt: str         # prompt: pdb's own prompt, "(Pdb) "
    traceback: str      # offer: the failure's traceback (the cell's lines)
    post_mortem: bool   # prompt: of a post-mortem (--pdb, %distribute_debug) rather than breakpoint()


class WhereMsg(TypedDict):
    t: Literal["where"]


class PdbReplyMsg(TypedDict):
    t: Literal["pdb_reply"]
    line: str | None    # the user's line; None: end of input (pdb quits). To an offer: "debug", or None


class WhereWantedMsg(TypedDict):
    t: Literal["where_wanted"]
