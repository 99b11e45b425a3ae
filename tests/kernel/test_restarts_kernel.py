"""--max-restarts in a real kernel: a rank killed mid-cell, the cell's value from the attempt that finished, one
view whose report shows the failed attempt, and kept ranks restarted at the next cell with what the output says."""
from __future__ import annotations

import pytest

from ..support.kernel import Kernel

pytestmark = pytest.mark.slow

REPORT = "application/vnd.jupyter-torchdist.run+json"

TRAIN = """\
%%distribute -n 2 --local --max-restarts 1
import os, signal, torch, torch.distributed as dist
w = torch.zeros(1)
step = jt.restore(w=w)
for s in range(step, 10):
    t = torch.ones(1)
    dist.all_reduce(t)
    w += t
    jt.commit(s + 1, w=w)
    if s == 4 and step == 0 and dist.get_rank() == 1:
        import time; time.sleep(0.5); os.kill(os.getpid(), signal.SIGKILL)
(step, w.item())
"""


def test_a_cell_restarts_after_a_killed_rank_and_its_report_shows_the_attempt():
    kernel = Kernel({"JUPYTER_TORCHDIST_WARMUP": "0"})
    try:
        assert kernel.execute("%load_ext jupyter_torchdist\nimport jupyter_torchdist as jt")["status"] == "ok"
        r = kernel.execute(TRAIN, timeout=120)
        assert r["status"] == "ok", kernel.text(r)
        assert [o["data"]["text/plain"] for o in r["outputs"] if o["output_type"] == "execute_result"] == ["(5, 20.0)"]
        reports = [o["data"][REPORT] for o in r["outputs"] if REPORT in o.get("data", {})]
        assert len(reports) == 1 and reports[0]["status"] == "succeeded", reports  # one view across the attempts
        notices = reports[0]["notices"]
        assert any(n.startswith("attempt 1 of 2 failed: rank 1 on") and "SIGKILL" in n and "restarted from step 5"
                   in n for n in notices), notices
        assert "(attempt 2)" in reports[0]["title"] and reports[0]["options"]["max_restarts"] == 1
        r = kernel.execute("%%distribute -n 2 --local --max-restarts 1\n1 / 0")  # the cell's own error: once
        assert r["status"] == "error" and "ZeroDivisionError" in kernel.text(r)
        assert "attempt" not in kernel.text(r)
    finally:
        kernel.shutdown()


def test_kept_ranks_restart_at_the_next_cell_and_say_so():
    kernel = Kernel({"JUPYTER_TORCHDIST_WARMUP": "0"})
    try:
        assert kernel.execute("%load_ext jupyter_torchdist\nimport jupyter_torchdist as jt")["status"] == "ok"
        r = kernel.execute("%%distribute -n 2 --local --keep --max-restarts 1\nimport os, signal, torch\n"
                           "import torch.distributed as dist\nw = torch.zeros(1)\nstep = jt.restore(w=w)")
        assert r["status"] == "ok", kernel.text(r)
        r = kernel.execute("%%distribute --keep --local\nw += 5\nstep += 1\njt.commit(step, w=w)\nlater = 1")
        assert r["status"] == "ok", kernel.text(r)
        r = kernel.execute("%%distribute --keep --local\nif dist.get_rank() == 0:\n    import time; time.sleep(0.5)\n"
                           "    os.kill(os.getpid(), signal.SIGKILL)\ndist.barrier()")
        assert r["status"] == "error" and "start again from the last commit at the next cell" in kernel.text(r)
        r = kernel.execute("%%distribute --keep --local\n(step, w.item(), 'later' in globals())")
        text = kernel.text(r)
        assert r["status"] == "ok" and "(1, 5.0, False)" in text, text
        assert "kept ranks restarted from step 1; names defined since then are gone" in text, text
    finally:
        kernel.shutdown()
