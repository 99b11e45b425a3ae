"""The first cell of a fresh notebook (issue 23): sent right after %load_ext returns, it runs its ranks as local
processes while the embedded Spark session starts, and says so; once the session is up, runs go to it; a run that
must be Spark tasks (TorchDistributor(local_mode=False)) waits for it; the warm-up's process server goes when idle."""
from __future__ import annotations

import pytest

from ..support.kernel import Kernel

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPORT = "application/vnd.jupyter-torchdist.run+json"
CELL = ("%%distribute -n 2\nimport torch, torch.distributed as dist\nt = torch.ones(1)\ndist.all_reduce(t)\n"
        "t.item()")


def _backend(r: dict) -> str:
    return [o["data"][REPORT] for o in r["outputs"] if REPORT in o.get("data", {})][-1]["backend"]


def test_the_first_cell_does_not_wait_for_the_jvm_and_later_cells_run_on_spark():
    kernel = Kernel({"JUPYTER_TORCHDIST_WARMUP": "1"})
    try:
        assert kernel.execute("%load_ext jupyter_torchdist\nimport jupyter_torchdist as jt")["status"] == "ok"
        r = kernel.execute(CELL, timeout=120)
        assert r["status"] == "ok" and "2.0" in kernel.text(r), kernel.text(r)
        assert _backend(r) == "local processes (the embedded Spark session is still starting)"
        r = kernel.execute("from jupyter_torchdist import TorchDistributor\n"
                           "def f():\n    import torch.distributed as dist\n    return dist.get_world_size()\n"
                           "print(TorchDistributor(2, local_mode=False, use_gpu=False).run(f))", timeout=180)
        assert r["status"] == "ok" and "2" in kernel.text(r), kernel.text(r)
        assert _backend(r).startswith("spark local[") and _backend(r).endswith("(embedded)")  # waited for Spark
        r = kernel.execute(CELL, timeout=120)
        assert r["status"] == "ok" and _backend(r).endswith("(embedded)"), kernel.text(r)
        r = kernel.execute("from jupyter_torchdist.launchers.local_server import zygote_pid\nprint(zygote_pid())")
        assert kernel.text(r).strip() == "None"  # the warm-up's process server went once Spark was up
    finally:
        kernel.shutdown()


def test_kept_ranks_started_while_the_session_starts_stay_where_they_are():
    kernel = Kernel({"JUPYTER_TORCHDIST_WARMUP": "1"})
    try:
        assert kernel.execute("%load_ext jupyter_torchdist\nimport jupyter_torchdist as jt")["status"] == "ok"
        r = kernel.execute("%%distribute -n 2 --keep\nimport os\nx = 1\nos.getpid()", timeout=120)
        assert r["status"] == "ok" and _backend(r).startswith("local processes"), kernel.text(r)
        assert kernel.execute("jt.spark_session(); print('up')", timeout=180)["status"] == "ok"
        r = kernel.execute("%%distribute --keep\nx += 1\nx", timeout=60)
        text = kernel.text(r)
        assert r["status"] == "ok" and "stopped the" not in text and "2" in text, text
    finally:
        kernel.shutdown()
