"""The run's debugging record and the stall rule: pure, no I/O, no clock (every time is given).

A run is **stalled** when no rank has made progress (no ``report()``, no output line, no state change, no
debugger prompt) for ``stall_after`` seconds and at least one running rank has waited in one collective for at
least as long: the shape of every DDP hang (a rank waits in ``all_reduce`` for a peer that took another branch,
ran out of data, or is stuck elsewhere). A rank busy in a long computation without collectives is not stalled,
nor is a run whose ranks keep printing. The rule is judged from what the ranks send anyway (their usage
reading names the collective once a second); it says so and shows where every rank is, and never stops the run.

``fold_debug`` is ``RunState.apply``'s one call into this: it folds what a rank's messages say about where it
is (``places``) and whether the run moves.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ...core import contract as C
from .places import RankLike, fold_collective, fold_pdb, fold_place

__all__ = ["RunDebug", "fold_debug", "stalled", "stall_text", "STALL_AFTER_S"]

STALL_AFTER_S: Final = 30.0
_NOT_PROGRESS: Final = frozenset({C.USAGE, C.PLACE, C.DROPPED})  # a rank's messages that say nothing moved


@dataclass
class RunDebug:
    stall_after: float | None = STALL_AFTER_S  # None: never judged stalled
    last_progress: float | None = None         # when any rank last moved (None: not since the run began)
    stalled_at: float | None = None            # when the run was found stalled (None: it is not)
    quit_rank: int | None = None               # the rank whose pdb the user quit (q): the run ends on their word

    def progressed(self, at: float) -> None:
        self.last_progress = at if self.last_progress is None else max(self.last_progress, at)
        if self.stalled_at is not None and at >= self.stalled_at:
            self.stalled_at = None


def fold_debug(debug: RunDebug, ranks: Sequence[RankLike], rank: int, role: C.Role, msg: C.InboundMessage,
               at: float) -> None:
    """What a rank's message says about where it is and whether the run moves (its other meaning is folded by
    ``RunState``)."""
    if role != C.RANK or not 0 <= rank < len(ranks):
        return
    d = ranks[rank].debug
    if msg["t"] == C.USAGE:
        fold_collective(d, msg, at)
    elif msg["t"] == C.PLACE:
        fold_place(d, msg, at)
    elif msg["t"] == C.PDB:
        fold_pdb(d, msg)
    if msg["t"] not in _NOT_PROGRESS and msg["t"] not in (C.CONNECTED, C.DISCONNECTED):
        debug.progressed(at)


def _waiters(ranks: Sequence[RankLike], now: float) -> list[tuple[float, RankLike]]:
    """Running ranks in a collective, longest wait first."""
    out = [(now - r.debug.collective_since, r) for r in ranks
           if r.state == "running" and r.debug.collective and r.debug.collective_since is not None]
    return sorted(out, key=lambda x: (-x[0], x[1].rank))


def stalled(debug: RunDebug, ranks: Sequence[RankLike], started_at: float, now: float) -> bool:
    """Whether the run is stalled at ``now`` (recording since when); False once anything moved again."""
    after = debug.stall_after
    if not after or any(r.debug.paused for r in ranks):
        debug.stalled_at = None
        return False
    quiet = now - (debug.last_progress if debug.last_progress is not None else started_at)
    waiters = _waiters(ranks, now)
    if quiet >= after and waiters and waiters[0][0] >= after:
        if debug.stalled_at is None:
            debug.stalled_at = now
        return True
    debug.stalled_at = None
    return False


def stall_text(debug: RunDebug, ranks: Sequence[RankLike], started_at: float, now: float) -> str | None:
    """The notice for a stalled run (None when it is not)."""
    if debug.stalled_at is None:
        return None
    waiters = _waiters(ranks, now)
    if not waiters:
        return None
    quiet = now - (debug.last_progress if debug.last_progress is not None else started_at)
    waited, first = waiters[0]
    others = f" ({len(waiters)} ranks wait in collectives)" if len(waiters) > 1 else ""
    return (f"stalled: no rank has made progress for {quiet:.0f} s, and rank {first.rank} has waited in "
            f"{first.debug.collective} for {waited:.0f} s{others}. Where each rank is shows below; the run goes on "
            "until it moves, is interrupted or times out.")
