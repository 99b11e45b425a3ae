"""A cluster session whose executors come after the cell starts: the run waits for its task slots, saying so,
within a bound; an interrupt ends the wait; a cluster with no executors is said plainly when the bound passes."""
from __future__ import annotations

import textwrap
import threading
import time

import pytest

from ..support.cluster import add_worker, kernel_on, start, stop

SOLO = "a worker that joins late gets the ranks within 30 s, and the waits end within their bounds"  # workers.py

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

ALL_REDUCE = ("import torch, torch.distributed as dist\nt = torch.ones(1)\ndist.all_reduce(t)\n"
              "import time as _t\n(t.item(), _t.time())")


@pytest.fixture(scope="module")
def empty_cluster(tmp_path_factory):
    """A master with no worker yet, and a kernel whose session is on it (no executor registered)."""
    c = start(tmp_path_factory.mktemp("late-workers"), workers=0)
    kernel = None
    try:
        kernel = kernel_on(c)
        yield c, kernel
    finally:
        if kernel is not None:
            kernel.shutdown()
        survivors = stop(c)
        assert not survivors, survivors


def test_no_executors_within_the_bound_is_said_plainly(empty_cluster):
    c, kernel = empty_cluster
    r = kernel.execute("%%distribute -n 2 --wait 3\n1", timeout=60)
    text = kernel.text(r)
    assert r["status"] == "error" and "LaunchError" in text, text
    assert "after waiting 3 s" in text and "has 0 (0 executors)" in text and "spark.cores.max" in text
    assert "waiting for 2 task slots on spark://" in text  # what it waited for, while it waited
    assert 3 <= r["seconds"] < 20
    r = kernel.execute("%%distribute -n 2 --wait 0\n1", timeout=60)
    assert r["status"] == "error" and "--wait SECONDS" in kernel.text(r) and r["seconds"] < 10


def test_an_interrupt_ends_the_wait_and_the_kernel_stays_usable(empty_cluster):
    c, kernel = empty_cluster
    r = kernel.execute("%%distribute -n 2 --wait 300\n1", timeout=60, interrupt_after=3)
    assert r["status"] == "error" and r["error"]["ename"] == "RunInterrupted"
    assert "interrupted before any rank started" in kernel.text(r)
    assert r["seconds"] < 20
    assert "2" in kernel.text(kernel.execute("print(1 + 1)"))


def test_a_worker_that_joins_after_the_cell_started_gets_the_ranks(empty_cluster):
    c, kernel = empty_cluster
    done: dict[str, dict] = {}
    # The cell runs on a helper thread; the worker is started from this (the main) thread, because the JVMs die
    # with the thread that started them (their parent-death signal), and this one outlives the test.
    cell = threading.Thread(target=lambda: done.update(r=kernel.execute(f"%%distribute -n 2 --wait 120\n{ALL_REDUCE}",
                                                                        timeout=240)))
    cell.start()
    time.sleep(6)  # test-side: the worker comes 6 s after the cell started
    add_worker(c, 0, cores=2)
    registered = time.time()
    cell.join()
    r = done["r"]
    text = kernel.text(r)
    assert r["status"] == "ok", text + c.logs()
    assert "waiting for 2 task slots" in text and "task slots after" in text
    values = [o["data"]["text/plain"] for o in r["outputs"] if o["output_type"] == "execute_result"]
    assert eval(values[-1])[0] == 2.0
    started = kernel.text(kernel.execute("print(min(r.started_at for r in jt.last_run().state.ranks))"))
    to_start = float(started.strip()) - registered
    print(f"worker registered -> ranks started: {to_start:.1f} s")  # the closing note's figure
    assert to_start < 30


def test_a_run_on_a_helper_thread_uses_the_notebooks_session(empty_cluster):
    """The active session is per thread: a run started on another thread than the notebook's session was built on
    still runs on that session (not on an "embedded" session that pyspark's builder would hand back as it)."""
    c, kernel = empty_cluster
    r = kernel.execute(textwrap.dedent("""\
        import threading
        out = {}
        th = threading.Thread(target=lambda: out.update(v=jt.run(lambda: 1, n=2)))
        th.start(); th.join(120)
        print(out.get("v"), "|", jt.last_run().state.backend)
    """), timeout=180)
    text = kernel.text(r)
    assert text.strip().startswith("1 | spark spark://") and "embedded" not in text, text
