"""Unit: the rank side of debugging, in this process: a thread's stack in the cell's own lines, the collective
marker, and pdb whose console is the channel (a fake runtime stands in for the rank's client and link)."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from jupyter_torchdist.core import contract as C
from jupyter_torchdist.core.travel import register_source
from jupyter_torchdist.rank import collectives, debugger, runtime, places as where

CELL = "Cell In[9]"
SOURCE = "%%distribute -n 2\nimport threading\nev = threading.Event()\nstarted.set()\nev.wait(30)\n"


def _cell_thread() -> tuple[threading.Thread, dict]:
    """A thread running the cell's code (compiled under the cell's name), blocked in ``ev.wait`` at line 5."""
    register_source(CELL, SOURCE)
    code = compile("\n" + SOURCE.split("\n", 1)[1], CELL, "exec")  # line 1 is the magic's
    env = {"started": threading.Event()}
    thread = threading.Thread(target=exec, args=(code, env), daemon=True)
    thread.start()
    assert env["started"].wait(10)
    time.sleep(0.2)
    return thread, env


def test_a_threads_stack_reads_in_cell_lines_with_library_frames_folded():
    where.set_cell(CELL)
    thread, env = _cell_thread()
    msg = where.place_message(thread.ident)
    env["ev"].set()
    frames = msg["frames"]
    assert frames[0] == {"where": "cell line 5", "name": "<module>", "code": "ev.wait(30)", "call": "ev.wait",
                         "library": 0}, "the machinery above the cell (threading's run) is left out"
    assert len(frames) == 2 and frames[1]["library"] >= 1 and frames[1]["where"].startswith("threading.py line")
    assert msg["collective"] is None and msg["t"] == C.PLACE


def test_the_collective_marker_names_the_outermost_call_of_the_marked_thread_only():
    seen = []

    def inner(x):
        seen.append(collectives.current())
        return x

    marked_inner = collectives._marked("all_gather", inner)
    outer = collectives._marked("all_gather_object", lambda x: marked_inner(x))
    collectives._marker.main = threading.get_ident()
    try:
        assert outer(5) == 5 and seen[0][0] == "all_gather_object" and seen[0][1] >= 0
        assert collectives.current() is None, "cleared on the way out"
        other = threading.Thread(target=lambda: outer(1))
        other.start()
        other.join()
        assert seen[1] is None, "another thread's collectives are not the main thread's"
        with pytest.raises(ZeroDivisionError):
            collectives._marked("barrier", lambda: 1 / 0)()
        assert collectives.current() is None, "cleared when the call raises"
    finally:
        collectives._marker.main = None


def test_install_marks_torchs_collectives_and_uninstall_puts_them_back():
    dist = pytest.importorskip("torch.distributed")
    original = dist.all_reduce
    try:
        assert collectives.install()
        assert dist.all_reduce is not original and dist.all_reduce.__wrapped__ is original
        import torch.autograd

        assert torch.autograd.backward.__name__ == "backward"
    finally:
        collectives.uninstall()
    assert dist.all_reduce is original


class _Link:
    def __init__(self, lines: list[str | None]) -> None:
        self.lines = lines

    def pdb_reply(self):
        line = self.lines.pop(0) if self.lines else None
        return {"t": C.PDB_REPLY, "line": line}


def _fake_rank(lines: list[str | None]) -> list[dict]:
    sent: list[dict] = []
    runtime.install(SimpleNamespace(client=SimpleNamespace(post=lambda msg, urgent=False: sent.append(msg)),
                                    link=_Link(lines), rank=1))
    return sent


def test_breakpoint_prompts_over_the_channel_and_p_shows_the_value():
    sent = _fake_rank(["p x * 2", "c"])
    try:
        def cell():
            x = 21
            debugger._breakpoint()
            return x

        assert cell() == 21
    finally:
        runtime.install(None)
    prompts = [m for m in sent if m["t"] == C.PDB]
    assert [m["kind"] for m in prompts] == ["prompt", "prompt"]
    assert "return x" in prompts[0]["text"] and prompts[0]["prompt"] == "(Pdb) "
    assert prompts[1]["text"].strip() == "42"


def test_q_in_a_breakpoint_tells_the_kernel_and_the_cell_ends_as_an_interrupt():
    sent = _fake_rank(["q"])
    try:
        def cell():
            debugger._breakpoint()
            return 1

        outcome: tuple = ("ok", None)
        try:
            cell()
        except BaseException as exc:  # pdb's BdbQuit
            outcome = ("error", exc)
    finally:
        runtime.install(None)
    assert [m["kind"] for m in sent] == ["prompt", "quit"]
    assert debugger.quit_outcome(outcome)[0] == "interrupted"


def test_post_mortem_is_offered_and_runs_only_when_the_kernel_takes_it():
    for answer, expected in ((None, ["offer"]), ("debug", ["offer", "prompt", "prompt", "end"])):
        sent = _fake_rank([answer, "p d", "q"] if answer else [None])
        debugger.begin_cell(True)
        try:
            try:
                d = 0
                1 / d
            except ZeroDivisionError as exc:
                debugger.offer_post_mortem(exc, __file__)
        finally:
            debugger.begin_cell(False)
            runtime.install(None)
        assert [m["kind"] for m in sent] == expected
        assert sent[0]["text"] == "ZeroDivisionError: division by zero"
    assert "1 / d" in sent[1]["text"] and sent[1]["post_mortem"] and sent[2]["text"].strip() == "0"


def test_a_where_that_comes_while_the_group_forms_is_passed_over_for_the_rendezvous():
    import socket

    from jupyter_torchdist.channel import protocol as P
    from jupyter_torchdist.rank.group import rendezvous

    rank_end, kernel_end = socket.socketpair()
    plan = SimpleNamespace(loopback=True, world_size=1, pg_timeout_s=30, gpu=False, per_node=0)
    rdv = {"t": C.RENDEZVOUS, "master_addr": "127.0.0.1", "master_port": 1, "local_rank": 0, "local_world_size": 1}
    P.send_frame(kernel_end, {"t": C.WHERE})  # an interrupt asked before the last hello reached the kernel
    P.send_frame(kernel_end, rdv)
    got, store = rendezvous(rank_end, plan, 0, None)
    assert got == rdv and store is not None
    assert P.recv_frame(kernel_end, 1 << 20)["t"] == C.HELLO
    P.send_frame(kernel_end, {"t": C.CELL})  # anything else first is still the kernel ending the run
    with pytest.raises(RuntimeError, match="ended the run before it started"):
        rendezvous(rank_end, plan, 0, None)
    rank_end.close(), kernel_end.close()


def test_a_where_that_comes_before_the_rank_can_answer_is_answered_once_it_can():
    import socket

    from jupyter_torchdist.channel import protocol as P
    from jupyter_torchdist.rank.link import KernelLink

    rank_end, kernel_end = socket.socketpair()
    link = KernelLink(rank_end)
    P.send_frame(kernel_end, {"t": C.WHERE})  # every rank said hello: the kernel asks while this one sets up
    P.send_frame(kernel_end, {"t": C.RELEASE})
    assert link.wait_release()  # the WHERE was read (it came first) with nothing yet to answer it
    answered = threading.Event()
    link.on_where(answered.set)
    assert answered.is_set()  # answered as the handler came, not dropped
    answered.clear()
    P.send_frame(kernel_end, {"t": C.WHERE})
    assert answered.wait(10)
    kernel_end.close()
    rank_end.close()
