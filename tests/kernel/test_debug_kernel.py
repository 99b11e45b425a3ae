"""Debugging in a real kernel (--local ranks): where each rank is on an interrupt and on --timeout, the stall in
the live view, breakpoint() and --pdb answered over the kernel's stdin channel as a front end would."""
from __future__ import annotations

import time
from typing import Any

import pytest

from ..support.kernel import Kernel, loaded_kernel

HANG = ("%%distribute -n 2 --local {opts}\n"
        "import time, torch, torch.distributed as dist\n"
        "t = torch.ones(1)\n"
        "print('entering', flush=True)\n"
        "if dist.get_rank() == 0:\n"
        "    dist.all_reduce(t)\n"            # cell line 6
        "else:\n"
        "    time.sleep(120)\n")              # cell line 8
BREAK = ("%%distribute -n 2 --local\n"
         "import torch, torch.distributed as dist\n"
         "x = dist.get_rank() + 10\n"
         "if dist.get_rank() == 1:\n"
         "    breakpoint()\n"
         "t = torch.tensor([float(x)])\n"     # cell line 6: where pdb stops
         "dist.all_reduce(t)\n"
         "t.item()")
ZERO = ("%%distribute -n 2 --local --pdb\n"
        "import torch, torch.distributed as dist\n"
        "d = 1 - dist.get_rank()\n"
        "q = 10 / d\n"                        # cell line 4: rank 1 divides by zero
        "t = torch.ones(1)\n"
        "dist.all_reduce(t)\n")


@pytest.fixture(scope="module")
def kernel():
    with loaded_kernel({"JUPYTER_TORCHDIST_WARMUP": "0"}) as k:
        yield k


def _snapshots(into: list[tuple[float, dict[str, Any]]]):
    """A watcher keeping every live-view snapshot the cell sends, with when it came: the widget's first frame (it
    opens once the cell has run SHOW_AFTER_S, with the run as it is then) and every frame after it."""
    def watch(msg: dict[str, Any]) -> None:
        opened_or_updated = msg["msg_type"] in ("comm_open", "comm_msg")
        state = msg["content"].get("data", {}).get("state", {}) if opened_or_updated else {}
        if state.get("snapshot"):
            into.append((time.monotonic(), state["snapshot"]))
    return watch


def _both_entered(seen: list[tuple[float, dict[str, Any]]], then_s: float):
    """True ``then_s`` after the live view first showed both ranks past their ``print('entering')``."""
    def due() -> bool:
        entered = next((at for at, s in seen if all(r["last_line"] == "entering" for r in s["ranks"])), None)
        return entered is not None and time.monotonic() - entered >= then_s
    return due


def test_an_interrupt_says_where_each_rank_was(kernel: Kernel):
    seen: list[tuple[float, dict[str, Any]]] = []
    r = kernel.execute(HANG.format(opts=""), interrupt_when=_both_entered(seen, 1.5), watch=_snapshots(seen),
                       timeout=90)
    assert r["error"]["ename"] == "RunInterrupted", kernel.text(r)
    text = kernel.text(r)
    assert "Where each rank was when the run stopped:" in text
    assert "rank 0: waiting in all_reduce at cell line 6 for " in text and "cell line 6: dist.all_reduce(t)" in text
    assert "rank 1: in time.sleep at cell line 8" in text, text


def test_timeout_says_where_each_rank_was_and_the_view_said_stalled_within_the_threshold(kernel: Kernel):
    seen: list[tuple[float, dict[str, Any]]] = []
    r = kernel.execute(HANG.format(opts="--timeout 16 --stall-after 4"), timeout=60, watch=_snapshots(seen))
    assert r["error"]["ename"] == "RunTimeout", kernel.text(r)
    assert "rank 0: waiting in all_reduce at cell line 6 for 1" in kernel.text(r)
    entered = next(at for at, s in seen if s["ranks"][0]["last_line"] == "entering")
    stalled = next((at, s) for at, s in seen if s.get("stall"))
    assert 3.5 <= stalled[0] - entered <= 4.0 + 3.0, f"the view said it {stalled[0] - entered:.1f} s after the hang"
    assert "rank 0 has waited in all_reduce" in stalled[1]["stall"]
    shown = next(s for at, s in seen if s.get("stall") and s["ranks"][1].get("place"))
    assert shown["ranks"][1]["place"]["summary"] == "in time.sleep at cell line 8", "a stall shows every rank's place"
    assert any(s["status"] == "running" for at, s in seen if at > stalled[0] + 3), "the stall did not stop the run"


def test_breakpoint_on_rank_1_opens_pdb_in_the_notebook_and_c_continues(kernel: Kernel):
    seen: list[tuple[float, dict[str, Any]]] = []
    r = kernel.execute(BREAK, answers=["p x", "w", "c"], timeout=120, watch=_snapshots(seen))
    assert r["status"] == "ok", kernel.text(r)
    assert r["prompts"] == ["rank 1 (Pdb) "] * 3
    streams = "".join(o.get("text", "") for o in r["outputs"] if o["output_type"] == "stream")
    assert "> Cell In[" in streams and "](6)<cell>()\n-> t = torch.tensor([float(x)])" in streams, streams
    assert "\n11\n" in streams, "p x printed rank 1's x"
    assert "_pickle" not in streams and "rank/main.py" not in streams, "w shows the cell, not our machinery"
    assert [o["data"]["text/plain"] for o in r["outputs"] if o["output_type"] == "execute_result"] == ["21.0"]
    assert any(s["ranks"][1].get("paused") == "pdb" for _, s in seen), "the view showed rank 1 paused"
    assert [r["state"] for r in seen[-1][1]["ranks"]] == ["done", "done"], "the live view's last frame: both done"


def test_q_in_pdb_ends_the_run_cleanly(kernel: Kernel):
    r = kernel.execute(BREAK, answers=["q"], timeout=120)
    assert r["error"]["ename"] == "RunInterrupted", kernel.text(r)
    assert "rank 1: you quit its debugger (q): every rank was stopped" in kernel.text(r)
    assert "BdbQuit" not in kernel.text(r)
    assert kernel.execute("print(6 * 7)")["status"] == "ok"


def test_an_interrupt_while_a_prompt_waits_stops_the_run_as_an_interrupt(kernel: Kernel):
    r = kernel.execute(BREAK, answers=lambda prompt: None, interrupt_after=12.0, timeout=120)
    text = kernel.text(r)
    assert r["error"]["ename"] == "RunInterrupted" and r["prompts"] == ["rank 1 (Pdb) "], text
    assert "interrupted: every rank was stopped" in text and "quit its debugger" not in text, text
    assert "rank 1: paused in pdb at cell line 6" in text or "rank 1: in " in text, text
    assert kernel.execute("print(6 * 7)")["status"] == "ok"


def test_pdb_opens_the_post_mortem_of_the_failing_rank_then_fails_with_the_root_cause(kernel: Kernel):
    r = kernel.execute(ZERO, answers=["p d", "q"], timeout=120)
    assert r["prompts"] == ["rank 1 (Pdb) "] * 2
    streams = "".join(o.get("text", "") for o in r["outputs"] if o["output_type"] == "stream")
    assert "rank 1 raised ZeroDivisionError: division by zero" in streams
    assert "](4)<cell>()\n-> q = 10 / d" in streams and "\n0\n" in streams, streams
    assert r["error"]["ename"] == "RunFailed", kernel.text(r)
    text = kernel.text(r)
    assert "rank 1 on " in text and "failed first: ZeroDivisionError: division by zero" in text
    assert 'File "Cell In[' in text and "line 4" in text


def test_without_stdin_breakpoint_stops_the_run_saying_why(kernel: Kernel):
    r = kernel.execute(BREAK, timeout=120)  # no answers: the front end does not allow input()
    assert r["error"]["ename"] == "RunInterrupted", kernel.text(r)
    assert "rank 1: stopped in pdb, but this front end cannot answer its prompts" in kernel.text(r)


def test_distribute_debug_opens_the_post_mortem_of_a_failed_kept_cell(kernel: Kernel):
    assert kernel.execute("%%distribute -n 2 --local --keep\nimport torch\nitems = [1, 2]")["status"] == "ok"
    r = kernel.execute("%%distribute --local --keep\nimport jupyter_torchdist as jt\nk = jt.rank() * 5\nitems[k]")
    assert r["error"]["ename"] == "RunFailed" and "survived" in kernel.text(r), kernel.text(r)
    r = kernel.execute("%distribute_debug", answers=["p k", "p items", "q"], timeout=60)
    assert r["status"] == "ok" and r["prompts"] == ["rank 1 (Pdb) "] * 3, kernel.text(r)
    streams = "".join(o.get("text", "") for o in r["outputs"] if o["output_type"] == "stream")
    assert "-> items[k]" in streams and "\n5\n" in streams and "[1, 2]" in streams, streams
    r = kernel.execute("%%distribute --local --keep\nk", timeout=60)
    assert r["status"] == "ok", f"the kept ranks go on after the post-mortem: {kernel.text(r)}"
    kernel.execute("%distribute_stop")
