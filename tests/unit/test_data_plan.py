"""Unit (pure): the epoch plan deals equal steps, each row at most once, whatever the partition sizes."""
from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_torchdist.data.plan import BLOCK_ROWS, block_order, plan_epoch

counts_st = st.lists(st.integers(0, 400), min_size=1, max_size=12)
skewed_st = st.lists(st.one_of(st.integers(0, 3), st.integers(500, 3000)), min_size=1, max_size=6)


def _batches(plan):
    """(rank, step) -> [(index, of, rows)] over every piece."""
    out = defaultdict(list)
    for piece in plan.pieces:
        for f in piece.fragments:
            out[(f.rank, f.step)].append((f.index, f.of, f.rows))
    return out


def _assert_plan_is_sound(counts, world, batch, lanes, drop_last, shuffle=True, seed=0, epoch=0):
    plan = plan_epoch(counts, world, batch, lanes=lanes, shuffle=shuffle, seed=seed, epoch=epoch,
                      drop_last=drop_last)
    total = sum(counts)
    batches = _batches(plan)
    # equal steps: every rank has a batch at every step, and nothing past the last step
    assert set(batches) == {(r, s) for r in range(world) for s in range(plan.steps)}
    sizes = {}
    for (rank, step), parts in batches.items():
        of = {p[1] for p in parts}
        assert len(of) == 1 and sorted(p[0] for p in parts) == list(range(of.pop())), "each fragment once"
        sizes[(rank, step)] = sum(p[2] for p in parts)
    for (_rank, step), size in sizes.items():
        if drop_last or step < plan.steps - 1:
            assert size == batch
    last = [sizes[(r, plan.steps - 1)] for r in range(world)] if plan.steps else []
    assert not last or (0 < min(last) and max(last) <= batch and max(last) - min(last) <= 1), last
    # each row at most once: pieces tile their partitions, and deliver a prefix of their rows
    by_partition = defaultdict(list)
    for piece in plan.pieces:
        by_partition[piece.partition].append((piece.lo, piece.hi))
        assert piece.used <= piece.hi - piece.lo
    for p, n in enumerate(counts):
        spans = sorted(by_partition.get(p, []))
        if n == 0:
            assert not spans
            continue
        assert [lo for lo, _ in spans] == [0] + [hi for _, hi in spans[:-1]] and spans[-1][1] == n
    assert plan.rows_used == sum(p.used for p in plan.pieces) == sum(p[2] for v in batches.values() for p in v)
    assert plan.rows_used + plan.rows_left_out == total
    assert plan.rows_left_out < (world * batch if drop_last else max(world, 1)) or plan.steps == 0
    if plan.steps == 0:
        assert total < world * batch or (not drop_last and total < world)
    # a piece's fragments go in increasing epoch order (a lane never waits on its own later work)
    for piece in plan.pieces:
        order = [f.step * world + f.rank for f in piece.fragments]
        assert order == sorted(order)
    return plan


@settings(max_examples=300, deadline=None)
@given(counts_st, st.integers(1, 5), st.integers(1, 37), st.integers(1, 6), st.booleans())
def test_equal_steps_no_duplicates_and_coverage(counts, world, batch, lanes, drop_last):
    _assert_plan_is_sound(counts, world, batch, lanes, drop_last)


@settings(max_examples=150, deadline=None)
@given(skewed_st, st.integers(1, 8), st.integers(1, 64), st.integers(1, 4), st.booleans(), st.integers(0, 3))
def test_skewed_partitions_still_give_equal_steps(counts, world, batch, lanes, drop_last, epoch):
    _assert_plan_is_sound(counts, world, batch, lanes, drop_last, epoch=epoch)


def test_the_plan_is_the_same_wherever_it_is_computed_and_changes_with_the_epoch():
    counts = [100, 37, 250, 0, 90]
    a = plan_epoch(counts, 2, 8, lanes=3, seed=7, epoch=1)
    assert a == plan_epoch(counts, 2, 8, lanes=3, seed=7, epoch=1)
    b = plan_epoch(counts, 2, 8, lanes=3, seed=7, epoch=2)
    assert [p.partition for p in a.pieces] != [p.partition for p in b.pieces] or a.lanes != b.lanes
    assert block_order(3000, True, 7, 1, (2, 0)) == block_order(3000, True, 7, 1, (2, 0))
    assert block_order(3000, True, 7, 1, (2, 0)) != block_order(3000, True, 7, 2, (2, 0))


def test_without_shuffle_rows_come_in_partition_order():
    plan = plan_epoch([5, 5, 5], 1, 5, lanes=1, shuffle=False)
    assert [(p.partition, p.lo, p.hi) for p in plan.pieces] == [(0, 0, 5), (1, 0, 5), (2, 0, 5)]
    assert block_order(10, False, 0, 0, (0, 0)) == list(range(10))


def test_blocks_keep_a_producers_memory_bounded():
    order = block_order(3 * BLOCK_ROWS + 5, True, 1, 0, (0, 0))
    for start in range(0, len(order), BLOCK_ROWS):
        assert sorted(order[start:start + BLOCK_ROWS]) == list(range(start, min(len(order), start + BLOCK_ROWS)))


def test_every_data_worker_gets_work_even_from_one_big_partition():
    plan = plan_epoch([10_000], 2, 32, lanes=4)
    assert len(plan.lanes) == 4 and all(sum(p.hi - p.lo for p in lane) > 1000 for lane in plan.lanes)


def test_the_lanes_take_turns_so_every_worker_makes_what_is_needed_next():
    plan = plan_epoch([64] * 8, 2, 8, lanes=4, shuffle=False)
    first = sorted((f.step * 2 + f.rank, p.lane) for p in plan.pieces for f in p.fragments)[:8]
    assert [lane for _, lane in first] == [0, 1, 2, 3, 0, 1, 2, 3]


def test_without_drop_last_every_rank_gets_one_smaller_last_batch():
    plan = plan_epoch([21], 4, 4, lanes=1, drop_last=False)
    sizes = defaultdict(int)
    for f in plan.pieces[0].fragments:
        sizes[(f.rank, f.step)] += f.rows
    assert plan.steps == 2 and [sizes[(r, 1)] for r in range(4)] == [2, 1, 1, 1] and plan.rows_left_out == 0


@pytest.mark.parametrize("bad", [dict(world=0), dict(batch=0), dict(lanes=0)])
def test_nonsense_sizes_are_refused(bad):
    args = {"world": 2, "batch": 4, "lanes": 1, **bad}
    with pytest.raises(ValueError):
        plan_epoch([10], args["world"], args["batch"], lanes=args["lanes"])
