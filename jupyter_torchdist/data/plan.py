"""Which rows go to which rank at which step, for one epoch: pure, deterministic, the same on every machine.

Given each partition's row count, the plan deals every rank the **same number of batches** (so DDP never
waits for a missing step), sends each row to at most one rank, and leaves out fewer than ``world * batch``
rows with ``drop_last`` (fewer than ``world`` without it: every rank then gets one smaller last batch).

How the work is cut:

* A **piece** is a contiguous range of one partition's rows; one Spark task reads it. Partitions larger than
  a fair share of the epoch are split so that every data worker has work (a split piece skips the rows
  before it, which costs a scan of them but no transform).
* Pieces are dealt to **lanes**, one per data worker, each lane to the least loaded so far; a lane runs its
  pieces one after another. Every piece's rows are read in order, shuffled within blocks (``block_order``).
* A lane's rows are cut into batches; the epoch takes one batch from each lane in turn, so all workers
  produce what the ranks need next. The lanes' last, partial batches are merged at the end of the epoch.
* Batch ``c`` of the epoch goes to rank ``c % world`` at step ``c // world``. A batch made of rows from
  several pieces arrives as several **fragments**, which the rank puts together.

A piece always delivers a prefix of its rows (what is left out is the end of the epoch), and its fragments
arrive in increasing batch order: that is what lets a lane run its pieces one at a time without deadlock.
"""
from __future__ import annotations

import bisect
import random
from dataclasses import dataclass

__all__ = ["Fragment", "Piece", "EpochPlan", "plan_epoch", "resume_plan", "block_order", "BLOCK_ROWS"]

BLOCK_ROWS = 1024  # rows shuffled together in a piece: a producer holds at most one block (and one batch)


@dataclass(frozen=True)
class Fragment:
    """``rows`` consecutive rows of a piece (in its shuffled order), part ``index`` of ``of`` of a batch."""

    rank: int
    step: int
    index: int
    of: int
    rows: int


@dataclass(frozen=True)
class Piece:
    """Rows ``[lo, hi)`` of ``partition`` (in partition order), run by ``lane``; its fragments, in order."""

    id: int
    partition: int
    lo: int
    hi: int
    lane: int
    fragments: tuple[Fragment, ...]
    skip: int = 0   # rows at the start of its (shuffled) order already delivered before a restart: not sent again

    @property
    def used(self) -> int:
        return sum(f.rows for f in self.fragments)


@dataclass(frozen=True)
class EpochPlan:
    steps: int                             # batches per rank this epoch (the same for every rank)
    rows_used: int
    rows_left_out: int
    lanes: tuple[tuple[Piece, ...], ...]   # per lane, its pieces in the order they run

    @property
    def pieces(self) -> list[Piece]:
        return [p for lane in self.lanes for p in lane]


def block_order(rows: int, shuffle: bool, seed: int, epoch: int, piece: tuple[int, int]) -> list[int]:
    """The order a piece's ``rows`` rows are taken in: shuffled within blocks of ``BLOCK_ROWS``."""
    order = list(range(rows))
    if shuffle:
        rng = random.Random(f"{seed}/{epoch}/{piece[0]}/{piece[1]}")
        for start in range(0, rows, BLOCK_ROWS):
            block = order[start:start + BLOCK_ROWS]
            rng.shuffle(block)
            order[start:start + BLOCK_ROWS] = block
    return order


def _pieces(counts: list[int], lanes: int, batch: int) -> list[tuple[int, int, int]]:
    """(partition, lo, hi) with no piece over a fair share of the epoch (and none under a batch, if split)."""
    total = sum(counts)
    share = max(batch, -(-total // (2 * lanes))) if lanes > 1 else max(total, 1)
    out = []
    for p, n in enumerate(counts):
        parts = max(1, min(-(-n // share), n // batch or 1))
        bounds = [n * i // parts for i in range(parts + 1)]
        out += [(p, lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]
    return out


def _deal(pieces: list[tuple[int, int, int]], lanes: int) -> list[list[tuple[int, int, int]]]:
    """Each piece, in order, to the lane with the fewest rows so far (ties: the lowest lane)."""
    dealt: list[list[tuple[int, int, int]]] = [[] for _ in range(lanes)]
    load = [0] * lanes
    for piece in pieces:
        k = min(range(lanes), key=lambda j: (load[j], j))
        dealt[k].append(piece)
        load[k] += piece[2] - piece[1]
    return dealt


Segment = tuple[int, int, int]  # (lane, offset in the lane's rows, rows)


def _epoch_batches(lane_rows: list[int], batch: int) -> tuple[list[list[Segment]], list[Segment]]:
    """Full batches, one lane after another in turn, then the lanes' tails merged; and the rows left over."""
    full = [n // batch for n in lane_rows]
    out: list[list[Segment]] = [[(k, j * batch, batch)] for j in range(max(full, default=0))
                                for k in range(len(lane_rows)) if j < full[k]]
    tails: list[Segment] = [(k, full[k] * batch, n % batch) for k, n in enumerate(lane_rows) if n % batch]
    current: list[Segment] = []
    room = batch
    for lane, offset, rows in tails:
        while rows:
            take = min(rows, room)
            current.append((lane, offset, take))
            offset, rows, room = offset + take, rows - take, room - take
            if room == 0:
                out.append(current)
                current, room = [], batch
    return out, current


def _sizes(total: int, world: int, batch: int, drop_last: bool) -> list[int]:
    """Rows of each batch, in epoch order: batch ``c`` is rank ``c % world``'s at step ``c // world``."""
    steps = total // (world * batch)
    sizes = [batch] * (steps * world)
    rest = total - steps * world * batch
    if not drop_last and rest >= world:
        sizes += [rest // world + (1 if r < rest % world else 0) for r in range(world)]
    return sizes


def _cut(stream: list[Segment], sizes: list[int]) -> list[list[Segment]]:
    """Cut the epoch's rows (segments in order) into batches of ``sizes``."""
    out: list[list[Segment]] = []
    queue = list(reversed(stream))
    for size in sizes:
        parts: list[Segment] = []
        while size:
            lane, offset, rows = queue.pop()
            take = min(rows, size)
            parts.append((lane, offset, take))
            if take < rows:
                queue.append((lane, offset + take, rows - take))
            size -= take
        out.append(parts)
    return out


def _starts(dealt: list[list[tuple[int, int, int]]]) -> list[list[int]]:
    """Per lane, where each of its pieces starts among the lane's rows."""
    out = []
    for lane in dealt:
        starts, at = [], 0
        for _, lo, hi in lane:
            starts.append(at)
            at += hi - lo
        out.append(starts)
    return out


def _fragments(batches: list[list[Segment]], dealt: list[list[tuple[int, int, int]]], world: int) \
        -> list[list[list[Fragment]]]:
    """Per lane, per piece, the fragments it sends (segments split where pieces end)."""
    frags: list[list[list[Fragment]]] = [[[] for _ in lane] for lane in dealt]
    starts = _starts(dealt)
    for c, segments in enumerate(batches):
        split = []
        for lane, offset, rows in segments:
            while rows:
                i = bisect.bisect_right(starts[lane], offset) - 1
                length = dealt[lane][i][2] - dealt[lane][i][1]
                take = min(rows, starts[lane][i] + length - offset)
                split.append((lane, i, take))
                offset, rows = offset + take, rows - take
        for j, (lane, i, rows) in enumerate(split):
            frags[lane][i].append(Fragment(c % world, c // world, j, len(split), rows))
    return frags


def plan_epoch(counts: list[int], world: int, batch: int, *, lanes: int = 1, shuffle: bool = True, seed: int = 0,
               epoch: int = 0, drop_last: bool = True) -> EpochPlan:
    """The plan for one epoch over partitions with ``counts`` rows (in partition order)."""
    if world < 1 or batch < 1 or lanes < 1:
        raise ValueError(f"world ({world}), batch ({batch}) and lanes ({lanes}) must be at least 1")
    pieces = _pieces(counts, lanes, batch)
    if shuffle:
        random.Random(f"{seed}/{epoch}").shuffle(pieces)
    dealt = [lane for lane in _deal(pieces, lanes) if lane]
    full, leftover = _epoch_batches([sum(hi - lo for _, lo, hi in lane) for lane in dealt], batch)
    total = sum(counts)
    sizes = _sizes(total, world, batch, drop_last)
    stream = [seg for b in full for seg in b] + leftover
    frags = _fragments(_cut(stream, sizes), dealt, world)
    ids = iter(range(len(pieces)))
    lanes_out = tuple(tuple(Piece(next(ids), p, lo, hi, k, tuple(frags[k][i])) for i, (p, lo, hi) in enumerate(lane))
                      for k, lane in enumerate(dealt))
    used = sum(sizes)
    return EpochPlan(len(sizes) // world if sizes else 0, used, total - used, lanes_out)


def resume_plan(plan: EpochPlan, taken: int) -> EpochPlan:
    """The rest of ``plan`` after every rank took its first ``taken`` batches (a restart resuming an epoch): the same
    rows at the same later steps, renumbered from 0. A piece's fragments come in increasing step order, so what was
    taken is a prefix of each piece's rows: the piece skips it (no transform) and sends the rest."""
    if taken <= 0:
        return plan
    lanes = []
    for lane in plan.lanes:
        kept = []
        for piece in lane:
            rest = tuple(Fragment(f.rank, f.step - taken, f.index, f.of, f.rows) for f in piece.fragments
                         if f.step >= taken)
            done = sum(f.rows for f in piece.fragments if f.step < taken)
            if rest:
                kept.append(Piece(piece.id, piece.partition, piece.lo, piece.hi, piece.lane, rest, piece.skip + done))
        lanes.append(tuple(kept))
    used = sum(p.used for lane in lanes for p in lane)
    return EpochPlan(max(0, plan.steps - taken), used, plan.rows_left_out, tuple(lane for lane in lanes if lane))
