"""Unit: where each rank is and the stall rule, as pure state: messages in, places, a stall notice and snapshots out."""
from __future__ import annotations

from jupyter_torchdist.core import contract as C
from jupyter_torchdist.kernel.state.places import where_lines
from jupyter_torchdist.kernel.state.run import RunState
from jupyter_torchdist.views.live import live_snapshot
from jupyter_torchdist.views.report_html import report_html
from jupyter_torchdist.views.report_text import report_text

CELL = {"where": "cell line 4", "name": "<cell>", "code": "dist.all_reduce(t)", "call": "dist.all_reduce", "library": 0}
LIB = {"where": "torch/distributed/distributed_c10d.py line 3252", "name": "all_reduce", "code": "work.wait()",
       "call": "", "library": 3}
SLEEP = {"where": "cell line 6", "name": "<cell>", "code": "time.sleep(100)", "call": "time.sleep", "library": 0}


def _running(n: int = 2, stall_after: float | None = 30.0) -> RunState:
    st = RunState(n, title="t", started_at=100.0)
    st.debug.stall_after = stall_after
    for r in range(n):
        st.apply(r, "rank", {"t": "hello", "host": "h", "pid": 1}, 100.0)
        st.apply(r, "rank", {"t": "state", "state": "running"}, 100.0)
    return st


def _usage(st: RunState, rank: int, at: float, collective: str | None = None, waited: float = 0.0) -> None:
    msg: dict = {"t": C.USAGE, "at": at, "rss": 1}
    if collective:
        msg.update(collective=collective, collective_s=waited)
    st.apply(rank, "rank", msg, at)


def _place(st: RunState, rank: int, frames: list, at: float, collective: str | None = None,
           waited: float | None = None) -> None:
    st.apply(rank, "rank", {"t": C.PLACE, "frames": frames, "collective": collective, "waited_s": waited, "at": at}, at)


def _stalled(st: RunState, now: float) -> bool:
    from jupyter_torchdist.kernel.state.stall import stalled

    st.now = now
    return stalled(st.debug, st.ranks, st.started_at, now)


def test_a_rank_long_in_a_collective_while_nobody_moves_is_a_stall_and_any_progress_ends_it():
    st = _running()
    st.apply(1, "rank", {"t": C.LOG, "stream": "stdout", "text": "epoch 1", "at": 110.0}, 110.0)
    for t in range(111, 142):
        _usage(st, 0, float(t), "all_reduce", t - 111.0)  # rank 0 entered all_reduce at 111
        _usage(st, 1, float(t))
    assert not _stalled(st, 139.0), "29 s without progress is under the threshold"
    assert _stalled(st, 141.0)
    text = st.snapshot()["stall"]
    assert text is not None and "rank 0 has waited in all_reduce for 30 s" in text and "progress for 31 s" in text
    st.apply(1, "rank", {"t": C.PROGRESS, "step": 3, "total": None, "metrics": {}, "at": 142.0}, 142.0)
    assert not _stalled(st, 142.5) and st.snapshot()["stall"] is None, "a report() from any rank is progress"


def test_no_stall_without_a_collective_while_paused_in_pdb_or_when_switched_off():
    busy = _running()
    for t in range(100, 200, 5):
        _usage(busy, 0, float(t))
    assert not _stalled(busy, 199.0), "a long computation outside collectives is not a stall"
    paused = _running()
    _usage(paused, 0, 150.0, "barrier", 50.0)
    paused.apply(1, "rank", {"t": C.PDB, "kind": "prompt", "text": "", "prompt": "(Pdb) ", "at": 101.0}, 101.0)
    assert not _stalled(paused, 150.0) and paused.snapshot()["ranks"][1]["paused"] == "pdb"
    off = _running(stall_after=None)
    _usage(off, 0, 500.0, "barrier", 400.0)
    assert not _stalled(off, 500.0)


def test_places_say_where_each_rank_is_in_the_cells_own_lines():
    st = _running()
    _place(st, 0, [CELL, LIB], 115.0, "all_reduce", 15.2)
    _place(st, 1, [SLEEP], 115.0)
    ranks = st.snapshot()["ranks"]
    assert ranks[0]["place"]["summary"] == "waiting in all_reduce at cell line 4 for 15.2 s"
    assert ranks[1]["place"]["summary"] == "in time.sleep at cell line 6"
    assert ranks[0]["place"]["frames"][1]["library"] == 3
    lines = where_lines(st.ranks)
    assert lines == ["  rank 0: waiting in all_reduce at cell line 4 for 15.2 s",
                     "      cell line 4: dist.all_reduce(t)",
                     "  rank 1: in time.sleep at cell line 6", "      cell line 6: time.sleep(100)"]


def test_a_place_from_a_rank_is_untrusted_input():
    st = _running(1)
    _place(st, 0, ["junk", {"where": 7, "library": True}, {**SLEEP, "code": "x" * 10_000}], 101.0)
    frames = st.snapshot()["ranks"][0]["place"]["frames"]
    assert len(frames) == 2 and frames[0]["where"] == "" and frames[0]["library"] == 0
    assert len(frames[1]["code"]) <= 200


def test_ranks_that_never_answered_or_ended_are_said_so():
    st = _running(3)
    st.apply(2, "rank", {"t": C.RESULT, "value": None, "repr": None, "at": 101.0}, 101.0)
    _place(st, 0, [CELL], 102.0, "all_reduce", 1.0)
    lines = where_lines(st.ranks)
    assert "rank 1: did not say" in lines[2] and "GIL" in lines[2]
    assert lines[3] == "  rank 2: done: its cell had ended"


def test_reports_show_the_stall_and_where_each_rank_is():
    st = _running()
    for t in range(101, 135):
        _usage(st, 0, float(t), "all_reduce", t - 101.0)
    _stalled(st, 134.0)
    _place(st, 0, [CELL, LIB], 134.0, "all_reduce", 33.0)
    _place(st, 1, [SLEEP], 134.0)
    snap = st.snapshot()
    text = report_text(snap)
    assert "stalled: no rank has made progress" in text and "where each rank is:" in text
    assert "rank 0: waiting in all_reduce at cell line 4 for 33.0 s" in text
    assert "cell line 4  dist.all_reduce(t)" in text
    assert "3 library frames" in text
    html = report_html(snap)
    assert "jtd-stall" in html and "in time.sleep at cell line 6" in html


def test_the_live_budget_keeps_stacks_of_many_ranks_small():
    st = _running(64)
    for r in range(64):
        _place(st, r, [dict(LIB, where=f"m{i}.py line {i}", library=0) for i in range(30)], 101.0)
    live = live_snapshot(st.snapshot())
    assert all(len(r["place"]["frames"]) == 4 for r in live["ranks"]), "64 ranks share the live stack budget"
    assert live["ranks"][0]["place"]["frames"][-1]["where"] == "m29.py line 29", "the innermost frames are kept"


def test_a_pdb_prompt_pauses_the_rank_until_its_end():
    st = _running()
    st.apply(1, "rank", {"t": C.PDB, "kind": "prompt", "text": "", "prompt": "(Pdb) ", "post_mortem": True,
                         "at": 101.0}, 101.0)
    assert st.snapshot()["ranks"][1]["paused"] == "post-mortem"
    st.apply(1, "rank", {"t": C.PDB, "kind": "end", "text": "", "at": 102.0}, 102.0)
    assert st.snapshot()["ranks"][1]["paused"] is None


def test_a_rank_never_asked_has_no_place_in_the_views():
    st = _running(2)
    st.apply(0, "rank", {"t": C.RESULT, "value": None, "repr": None, "at": 101.0}, 101.0)
    assert [r["place"] for r in st.snapshot()["ranks"]] == [None, None], "a run nobody asked about shows no places"
    st.ranks[1].debug.asked_at = 102.0
    st.now = 102.5
    assert st.snapshot()["ranks"][1]["place"] is None, "an answer may still be on its way"
    st.now = 103.5
    assert st.snapshot()["ranks"][1]["place"]["summary"].startswith("did not say")


def test_a_rank_whose_stack_waits_for_pdbs_next_line_reads_as_paused():
    st = _running(1)
    waiting = {"where": "rank/link.py line 50", "name": "pdb_reply", "code": "", "call": "", "library": 9}
    _place(st, 0, [dict(SLEEP, code="v = 2", call=""), waiting], 101.0)
    assert st.snapshot()["ranks"][0]["place"]["summary"] == "paused in pdb at cell line 6"


class _Sup:
    """What debugging uses of the supervisor: the run's state, and a channel that records what it sends."""

    def __init__(self, state: RunState) -> None:
        import queue

        self.state, self.inbox, self.stop_at, self.dirty, self.last_frame = state, queue.SimpleQueue(), None, False, 0.0
        self.sent: list[tuple[int, dict]] = []
        self.server = self

    def send(self, rank: int, role: str, msg: dict) -> bool:
        self.sent.append((rank, msg))
        return True

    def handle(self, ev) -> None: ...
    def stop(self, reason: str) -> None: ...
    def draw(self, now: float) -> None: ...


def test_ranks_still_forming_the_group_are_not_asked_and_are_said_to_be_joining():
    from jupyter_torchdist.kernel.runs.debugging import Debugging

    st = RunState(3, title="t", started_at=100.0)
    st.apply(0, "rank", {"t": "hello", "host": "h", "pid": 1}, 100.0)
    st.apply(1, "rank", {"t": "hello", "host": "h", "pid": 2}, 100.0)
    sup = _Sup(st)
    debugging = Debugging(sup)
    # until the rendezvous goes out a rank reads only it: a WHERE then would end it ("the kernel ended the run")
    debugging.before_stop("interrupted")
    assert sup.sent == [] and not debugging.capturing
    lines = where_lines(st.ranks)
    assert lines == ["  rank 0: starting: had not joined the group yet",
                     "  rank 1: starting: had not joined the group yet", "  rank 2: never started"]
    st.apply(2, "rank", {"t": "hello", "host": "h", "pid": 3}, 101.0)
    assert debugging.ask_where() and sorted(r for r, m in sup.sent) == [0, 1, 2]
    assert all(m["t"] == C.WHERE for r, m in sup.sent)
    assert "rank 0: did not say" in where_lines(st.ranks)[0]  # asked, and no answer came
