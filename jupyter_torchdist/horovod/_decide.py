"""The decision every rank takes from one round of control messages: the same on every rank, from the same data.

A round is an all_gather of one fixed-size message per rank: its status (inside ``join()``, waiting for a
collective, or issuing an async one that may wait for later), whether it joined in this very round, and its
candidate requests (the requests it has not launched yet, oldest first; see ``_request.ROW``). The first candidate
of the lowest active rank that every active rank also proposes is the collective of this round (unnamed requests of
a kind match in order: the first one on each rank):

- its signature differs between ranks: ``MISMATCH`` (every rank raises, naming each rank's side);
- a rank is inside ``join()`` and the kind is not one a joined rank takes part in (an allreduce of several dtypes
  at once included): ``REFUSED``;
- otherwise ``LAUNCH``: the active ranks issue it, a joined rank contributes zeros (allreduce, gradients).

No common candidate: ``NONE`` (an async request waits for a later round), or ``STALLED`` when every active rank is
waiting, since no later round can match them (Horovod would hang there). Every rank inside ``join()``:
``ALL_JOINED``, with the last rank to join.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ._request import ALLREDUCE, ROW, SERVED

__all__ = ["JOINED", "WAITING", "ASYNC", "HEADER", "LAUNCH", "MISMATCH", "REFUSED", "NONE", "STALLED", "ALL_JOINED",
           "Proposal", "Decision", "encode", "decode", "decide"]

JOINED, WAITING, ASYNC = 0, 1, 2
HEADER = 3  # status, fresh (joined in this round), number of candidates
LAUNCH, MISMATCH, REFUSED, NONE, STALLED, ALL_JOINED = "launch", "mismatch", "refused", "none", "stalled", "joined"


@dataclass
class Proposal:
    status: int
    fresh: bool
    rows: list[list[int]]

    def find(self, key: int) -> int | None:
        """Index of the first candidate with ``key``."""
        return next((i for i, row in enumerate(self.rows) if row[0] == key), None)


@dataclass
class Decision:
    kind: str
    key: int = 0
    picks: list[int | None] = field(default_factory=list)  # per rank: index of its candidate for ``key``
    joined: list[int] = field(default_factory=list)  # ranks inside join()
    last_joined: int = -1

    def rows(self, proposals: list[Proposal]) -> list[list[int] | None]:
        """Every rank's row for the chosen request (None for a rank inside join())."""
        return [None if pick is None else p.rows[pick] for p, pick in zip(proposals, self.picks)]


def encode(status: int, fresh: bool, rows: list[list[int]], capacity: int) -> list[int]:
    """One rank's message: header then ``capacity`` candidate rows (unused ones zero)."""
    flat = [status, int(fresh), len(rows)]
    for row in rows:
        flat.extend(row)
    return flat + [0] * (HEADER + capacity * ROW - len(flat))


def decode(flat: list[int], ranks: int) -> list[Proposal]:
    length = len(flat) // ranks
    out = []
    for r in range(ranks):
        msg = flat[r * length:(r + 1) * length]
        rows = [msg[HEADER + i * ROW:HEADER + (i + 1) * ROW] for i in range(msg[2])]
        out.append(Proposal(msg[0], bool(msg[1]), rows))
    return out


def _common(active: list[Proposal]) -> tuple[int, list[int]] | None:
    """The first candidate of the first active rank that every active rank proposes: (key, index per rank)."""
    for row in active[0].rows:
        picks = [p.find(row[0]) for p in active]
        if all(pick is not None for pick in picks):
            return row[0], picks  # type: ignore[return-value]
    return None


def decide(proposals: list[Proposal]) -> Decision:
    """The round's decision (see the module docstring)."""
    joined = [r for r, p in enumerate(proposals) if p.status == JOINED]
    if len(joined) == len(proposals):
        return Decision(ALL_JOINED, joined=joined, last_joined=max(r for r in joined if proposals[r].fresh))
    active = [p for p in proposals if p.status != JOINED]
    common = _common(active)
    if common is None:
        stalled = all(p.status == WAITING for p in active)
        return Decision(STALLED if stalled else NONE, joined=joined)
    key, active_picks = common
    picks: list[int | None] = []
    found = iter(active_picks)
    for p in proposals:
        picks.append(None if p.status == JOINED else next(found))
    rows = [row for row in Decision(LAUNCH, key, picks).rows(proposals) if row is not None]
    if any(row[1] != rows[0][1] for row in rows):
        return Decision(MISMATCH, key, picks, joined)
    if joined and (rows[0][2] not in SERVED or rows[0][2] == ALLREDUCE and rows[0][3] == 0):
        return Decision(REFUSED, key, picks, joined)
    return Decision(LAUNCH, key, picks, joined)
