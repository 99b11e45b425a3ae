"""Debugging on the embedded Spark session, in a real kernel: breakpoint() on a rank that is a Spark task, --pdb's
post-mortem, the Stacks request over the kernel's control channel, and kept ranks' %distribute_debug."""
from __future__ import annotations

import threading
import time

import pytest

from ..support.kernel import Kernel, loaded_kernel
from .test_debug_kernel import BREAK, HANG, ZERO

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def kernel():
    with loaded_kernel({"JUPYTER_TORCHDIST_WARMUP": "0"}) as k:
        yield k


def _spark(cell: str) -> str:
    return cell.replace(" --local", "")


def _streams(r: dict) -> str:
    return "".join(o.get("text", "") for o in r["outputs"] if o["output_type"] == "stream")


def test_breakpoint_and_post_mortem_on_spark_ranks(kernel: Kernel):
    r = kernel.execute(_spark(BREAK), answers=["p x", "c"], timeout=240)
    assert r["status"] == "ok" and r["prompts"] == ["rank 1 (Pdb) "] * 2, kernel.text(r)
    assert "\n11\n" in _streams(r) and "spark local" in kernel.text(r)
    r = kernel.execute(_spark(ZERO), answers=["p d", "q"], timeout=240)
    assert r["error"]["ename"] == "RunFailed" and "ZeroDivisionError: division by zero" in kernel.text(r)
    assert "\n0\n" in _streams(r) and r["prompts"] == ["rank 1 (Pdb) "] * 2


def test_the_stacks_control_reaches_a_busy_kernel_through_its_control_channel(kernel: Kernel):
    replies: list[dict] = []

    def press_stacks() -> None:
        time.sleep(7)
        msg = kernel.kc.session.msg("jupyter_torchdist_request", {"want": "stacks"})
        kernel.kc.control_channel.send(msg)
        replies.append(kernel.kc.control_channel.get_msg(timeout=10)["content"])

    seen: list[dict] = []

    def watch(msg: dict) -> None:
        state = msg["content"].get("data", {}).get("state", {}) if msg["msg_type"] == "comm_msg" else {}
        if state.get("snapshot"):
            seen.append(state["snapshot"])

    presser = threading.Thread(target=press_stacks)
    presser.start()
    r = kernel.execute(_spark(HANG.format(opts="--timeout 15")), timeout=120, watch=watch)
    presser.join()
    assert replies == [{"status": "ok", "accepted": True}], replies
    assert r["error"]["ename"] == "RunTimeout"
    asked = [s for s in seen if s["status"] == "running" and s["ranks"][0].get("place")]
    assert asked, "the places came while the run was still going"
    assert asked[0]["ranks"][0]["place"]["summary"].startswith("waiting in all_reduce at cell line 6 for ")
    assert asked[0]["ranks"][1]["place"]["summary"] == "in time.sleep at cell line 8"


def test_distribute_debug_on_spark_kept_ranks(kernel: Kernel):
    assert kernel.execute("%%distribute -n 2 --keep\nitems = [1, 2]", timeout=240)["status"] == "ok"
    r = kernel.execute("%%distribute --keep\nimport jupyter_torchdist as jt\nitems[jt.rank() * 5]")
    assert r["error"]["ename"] == "RunFailed", kernel.text(r)
    r = kernel.execute("%distribute_debug", answers=["p items", "c"], timeout=60)
    assert r["status"] == "ok" and "[1, 2]" in _streams(r) and len(r["prompts"]) == 2, kernel.text(r)
    kernel.execute("%distribute_stop")
    r = kernel.execute("%distribute_debug")
    assert "no kept ranks are up" in kernel.text(r)
