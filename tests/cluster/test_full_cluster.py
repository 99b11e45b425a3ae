"""A cluster shared by several notebooks at once (real kernels, each with its own session on one standalone
master): a notebook whose share is taken by others waits, says so and gives up within its bound; when another
notebook leaves, its cores go to the waiting one, which starts at once."""
from __future__ import annotations

import re
import threading
import time

import pytest

from ..support.cluster import kernel_on, start, stop

SOLO = "a waiting notebook is told within its --wait, and starts at once when the cores come back"  # workers.py

pytestmark = [pytest.mark.spark, pytest.mark.cluster, pytest.mark.slow]

SHARE = {"spark.cores.max": "2", "spark.executor.cores": "1"}
ALL_REDUCE = "import torch, torch.distributed as dist\nt = torch.ones(1)\ndist.all_reduce(t)\nt.item()"


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """One 2-core worker; notebook "alice" holds both cores, notebook "bob" has none."""
    c = start(tmp_path_factory.mktemp("full-cluster"), workers=1, cores=2, memory="2g")
    kernels = []
    try:
        kernels.append(kernel_on(c, SHARE, name="alice"))
        alice = kernels[0]
        got = alice.execute("import time as _t\nwhile executors() < 2: _t.sleep(0.2)\nprint(executors())", timeout=120)
        assert alice.text(got).strip() == "2", alice.text(got) + c.logs()
        ui = re.search(r"MasterWebUI.*started at (http://\S+)", (c.workdir / "master.log").read_text())
        assert ui, c.logs()
        kernels.append(kernel_on(c, {**SHARE, "spark.jupyter_torchdist.master.ui": ui[1]}, name="bob"))
        yield c, alice, kernels[1]
    finally:
        for kernel in kernels:
            kernel.shutdown()
        survivors = stop(c)
        assert not survivors, survivors


def test_a_notebook_whose_share_others_hold_waits_then_says_so(full):
    c, alice, bob = full
    r = alice.execute(f"%%distribute -n 2\n{ALL_REDUCE}")
    assert r["status"] == "ok", alice.text(r)  # the notebook holding the cores runs as usual
    r = bob.execute(f"%%distribute -n 2 --wait 4\n{ALL_REDUCE}", timeout=60)
    text = bob.text(r)
    assert r["status"] == "error" and "waiting for 2 task slots on spark://" in text, text
    assert "after waiting 4 s" in text and "other notebooks or applications hold them" in text
    assert "(the master says 2 of its 2 cores are in use; held by alice (root): 2 cores for" in text, text
    assert "spark.cores.max" in text and "%distribute_stop" in text
    assert 4 <= r["seconds"] < 20
    r = bob.execute(f"%%distribute -n 2 --wait 300\n{ALL_REDUCE}", timeout=60, interrupt_after=3)
    assert r["status"] == "error" and r["error"]["ename"] == "RunInterrupted"
    assert "interrupted before any rank started" in bob.text(r)
    assert r["seconds"] < 15
    assert "2" in bob.text(bob.execute("print(1 + 1)"))


def test_cores_another_notebook_frees_go_to_the_waiting_one(full):
    c, alice, bob = full
    done: dict[str, dict] = {}
    cell = threading.Thread(target=lambda: done.update(r=bob.execute(f"%%distribute -n 2 --wait 120\n{ALL_REDUCE}",
                                                                      timeout=240)))
    cell.start()
    time.sleep(4)  # test-side: bob has been waiting a while when alice leaves
    left = alice.execute("spark.stop(); import time as _t; print(_t.time())")
    freed_at = float(alice.text(left).split()[-1])
    cell.join()
    r, text = done["r"], bob.text(done["r"])
    assert r["status"] == "ok" and "2.0" in text and "waiting for 2 task slots" in text, text + c.logs()
    started = float(bob.text(bob.execute("print(min(r.started_at for r in jt.last_run().state.ranks))")).strip())
    print(f"cores freed by another notebook -> ranks started: {started - freed_at:.1f} s")  # the closing note's
    assert started - freed_at < 30
