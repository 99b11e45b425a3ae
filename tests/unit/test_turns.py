"""Runs take a backend's slots first in, first out (kernel/runs/turns.py), and Spark jobs of runs at once never wait
for each other's lane (launchers/spark_jobs.py): both with real threads, no Spark."""
from __future__ import annotations

import threading
import time

import pytest

from jupyter_torchdist.kernel.runs.turns import Ticket, Turns
from jupyter_torchdist.launchers.spark_jobs import _Lanes


def _waiter(turns: Turns, place: Ticket, slots: int | None, out: list, said: list | None = None,
            stopped=lambda: False, deadline=None) -> threading.Thread:
    def go():
        out.append((place.run, turns.wait(place, lambda: slots, stopped=stopped, deadline=deadline,
                                           show_waiting=(said.append if said is not None else lambda _: None))))
    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


def test_a_run_that_fits_goes_at_once_and_one_that_does_not_waits_for_a_release():
    turns, out, said = Turns(), [], []
    first, second = Ticket(1, 2, "spark"), Ticket(2, 2, "spark")
    assert turns.wait(first, lambda: 4) == "go"
    assert turns.wait(second, lambda: 4) == "go"
    third = _waiter(turns, Ticket(3, 2, "spark"), 4, out, said)
    time.sleep(0.3)
    assert out == [] and said == ["queued: needs 2 task slots of spark, 0 of 4 free; held by run 1 (2), run 2 (2); "
                                  "it goes next"]
    turns.release(first)
    third.join(2)
    assert out == [(3, "go")] and turns.held("spark") == 4


def test_first_in_first_out_even_when_a_later_smaller_run_would_fit():
    turns, out = Turns(), []
    assert turns.wait(Ticket(1, 3, "spark"), lambda: 4) == "go"
    big = _waiter(turns, Ticket(2, 2, "spark"), 4, out)
    time.sleep(0.2)
    said: list[str] = []
    small = _waiter(turns, Ticket(3, 1, "spark"), 4, out, said)  # one slot is free, but run 2 came first
    time.sleep(0.3)
    assert out == [] and "ahead of it: run 2 (2)" in said[0]
    turns.release(next(t for t in turns.holders("spark") if t.run == 1))
    big.join(2)
    small.join(2)
    assert [run for run, _ in out] == [2, 3]


def test_pools_do_not_wait_for_each_other_and_unlimited_or_never_enough_never_waits():
    turns = Turns()
    assert turns.wait(Ticket(1, 4, "spark"), lambda: 4) == "go"
    assert turns.wait(Ticket(2, 4, "connect"), lambda: 4) == "go"       # another pool
    assert turns.wait(Ticket(3, 8, "local"), lambda: None) == "go"      # no fixed slots
    assert turns.wait(Ticket(4, 9, "spark"), lambda: 4) == "go"         # can never fit: the launcher decides


def test_a_stop_or_the_deadline_ends_the_wait_and_the_next_in_line_moves_up():
    turns, out = Turns(), []
    assert turns.wait(Ticket(1, 2, "spark"), lambda: 2) == "go"
    flag = threading.Event()
    stopped = _waiter(turns, Ticket(2, 2, "spark"), 2, out, stopped=flag.is_set)
    later = _waiter(turns, Ticket(3, 2, "spark"), 2, out, deadline=time.time() + 0.6)
    time.sleep(0.2)
    flag.set()
    turns.wake()
    stopped.join(2)
    later.join(2)
    assert out == [(2, "stopped"), (3, "timeout")]
    assert turns.numbers("spark") == [1]


def test_a_ticket_that_joined_the_line_goes_first_even_if_it_asks_for_its_turn_last():
    """A background kept cell joins the line when it is submitted; its thread asks later than the next cell does."""
    turns, out = Turns(), []
    background, foreground = Ticket(1, 1, "kept ranks 1", what="turn"), Ticket(2, 1, "kept ranks 1", what="turn")
    turns.join(background)
    later = _waiter(turns, foreground, 1, out)
    time.sleep(0.3)
    assert out == [], "the cell submitted second went first"
    assert turns.wait(background, lambda: 1) == "go"
    turns.release(background)
    later.join(2)
    assert out == [(2, "go")]
    turns.release(foreground)
    gone = Ticket(3, 1, "kept ranks 1", what="turn")
    turns.join(gone)
    turns.leave(gone)  # its run ended before it asked: it holds up nobody
    assert turns.wait(Ticket(4, 1, "kept ranks 1", what="turn"), lambda: 1) == "go"


def test_a_kept_sets_turn_is_said_as_such():
    turns, said = Turns(), []
    assert turns.wait(Ticket(5, 1, "kept ranks 1", what="turn"), lambda: 1) == "go"
    _waiter(turns, Ticket(6, 1, "kept ranks 1", what="turn"), 1, [], said, deadline=time.time() + 0.3).join(2)
    assert said == ["queued: waiting for the kept ranks: run 5 runs a cell on them; it goes next"]


def test_a_lanes_jobs_run_in_order_and_lanes_side_by_side_on_reused_threads():
    lanes, log, pool = _Lanes(), [], threading.Event()
    lanes.submit(lambda: (pool.wait(5), log.append(("a", 1))), "a")
    lanes.submit(lambda: log.append(("a", 2)), "a")
    done_b = threading.Event()
    lanes.submit(lambda: (log.append(("b", 1)), done_b.set()), "b")
    assert done_b.wait(2), "lane b waited for lane a's job"
    assert log == [("b", 1)]
    pool.set()
    deadline = time.time() + 2
    while len(log) < 3 and time.time() < deadline:
        time.sleep(0.01)
    assert log == [("b", 1), ("a", 1), ("a", 2)]
    for i in range(5):  # later lanes take the idle threads: no new thread per job
        ran = threading.Event()
        lanes.submit(ran.set, f"c{i}")
        assert ran.wait(2)
    time.sleep(0.1)
    assert lanes.busy() == 0 and len(lanes._idle) == 2  # the two threads lanes a and b made, nothing more


@pytest.mark.parametrize("pool", ["spark", "sweep 1"])
def test_a_full_pool_holds_a_run_until_its_deadline(pool):
    turns = Turns()
    assert turns.wait(Ticket(1, 2, pool), lambda: 2) == "go"
    assert turns.wait(Ticket(2, 1, pool), lambda: 2, deadline=time.time()) == "timeout"


def test_kept_ranks_not_up_yet_with_a_cell_in_line_are_the_notebooks_for_the_next_cell():
    """A background kept cell starts its ranks on its own thread; until then, the next cell must find the same kept
    ranks (and wait its turn on them), not start others of its own (seen in CI: the next cell ran first, elsewhere)."""
    from jupyter_torchdist.core.options import RunOptions
    from jupyter_torchdist.kernel.kept.ranks import Ranks, notebook_ranks, set_notebook_ranks
    from jupyter_torchdist.kernel.runs.turns import turns

    ranks = Ranks.for_options(RunOptions(n=2, local=True))
    set_notebook_ranks(ranks)
    try:
        assert notebook_ranks() is None, "nothing in line, nothing up: no kept ranks"
        queued = Ticket(1, 1, ranks.turn_pool, what="turn")
        turns.join(queued)   # the background cell, submitted
        assert notebook_ranks() is ranks
        turns.leave(queued)
        assert notebook_ranks() is None
    finally:
        set_notebook_ranks(None)


def _kept_in_line(n: int):
    """The notebook's kept ranks (``-n n``) not up yet, with a background cell's run in line for them."""
    from jupyter_torchdist.core.options import RunOptions
    from jupyter_torchdist.kernel.kept.ranks import Ranks, set_notebook_ranks
    from jupyter_torchdist.kernel.runs.history import new_run
    from jupyter_torchdist.kernel.runs.turns import turns

    options = RunOptions(n=n, local=True, keep=True, background=True)
    ranks = Ranks.for_options(options)
    set_notebook_ranks(ranks)
    run = new_run("%%distribute --keep --background (a cell on kept ranks)", options)
    ticket = Ticket(run.number, 1, ranks.turn_pool, what="turn")
    turns.join(ticket)
    return ranks, run, ticket


def test_a_kept_cell_of_another_size_is_refused_while_a_background_cell_is_still_starting_the_kept_ranks():
    """Seen in review: ``--keep -n 4`` sent while a ``-n 2`` background cell was starting its ranks ran on 2 ranks,
    silently; it is refused, naming both sizes, as it is once the ranks are up."""
    from jupyter_torchdist.core.errors import LaunchError
    from jupyter_torchdist.core.options import RunOptions
    from jupyter_torchdist.kernel.kept.ranks import set_notebook_ranks
    from jupyter_torchdist.kernel.magics.kept import _ranks_for
    from jupyter_torchdist.kernel.runs.turns import turns

    ranks, run, ticket = _kept_in_line(2)
    try:
        with pytest.raises(LaunchError, match=rf"busy with run {run.number} and this cell asks for -n 4, the kept "
                                              r"ranks are -n 2"):
            _ranks_for(RunOptions(n=4, local=True, keep=True))
        assert _ranks_for(RunOptions(n=2, local=True, keep=True, n_explicit=False)) is ranks  # no -n: the same
    finally:
        turns.leave(ticket)
        set_notebook_ranks(None)


def test_distribute_stop_stops_a_background_cell_still_in_line_and_nothing_starts_the_ranks_after_it():
    """Seen in review: ``%distribute_stop`` while a background kept cell was only queued stopped nothing, and that cell
    then started the ranks. Now the cell is stopped, and the retired ranks refuse to start for anyone."""
    from jupyter_torchdist.core.errors import RunInterrupted
    from jupyter_torchdist.kernel.kept.ranks import KeptCell, notebook_ranks, set_notebook_ranks
    from jupyter_torchdist.kernel.magics.kept import stop_kept
    from jupyter_torchdist.kernel.pickling import pack
    from jupyter_torchdist.kernel.runs.turns import turns

    ranks, run, ticket = _kept_in_line(2)
    try:
        said = stop_kept()
        assert said.startswith("stopped the kept ranks before they were up") and f"run {run.number}" in said, said
        assert run.stop_asked == "%distribute_stop"
        assert notebook_ranks() is None
        with pytest.raises(RunInterrupted, match="stopped by %distribute_stop before this cell started"):
            ranks.ready(KeptCell(pack(len, ([],), {}, max_bytes=1 << 20), ranks.options, "t", "f", ""))
        assert ranks._up is None
    finally:
        turns.leave(ticket)
        set_notebook_ranks(None)
