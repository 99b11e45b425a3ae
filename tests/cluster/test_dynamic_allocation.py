"""Dynamic allocation on a real standalone cluster: the ranks run as ordinary tasks (Spark refuses barrier stages
there), Spark asks for an executor per waiting rank, the kernel's rendezvous gangs them; idle executors go back
after the run, kept ranks hold theirs; a rank's task is never run twice; ranks that can never start are said.

One worker of 4 cores; the notebook's session asks for 1-core executors, none at the start (minExecutors=0), and
gives an executor back after 3 s idle.
"""
from __future__ import annotations

import os
import re
import signal
import textwrap
import threading
import time

import pytest

from ..support.cluster import kernel_on, start, stop
from ..support.kernel import Kernel

SOLO = "executors come and go back within their idle timeout, a rank never started is said within --wait"  # workers

pytestmark = [pytest.mark.spark, pytest.mark.cluster, pytest.mark.slow]

IDLE_S = 3
DYNAMIC = {"spark.dynamicAllocation.enabled": "true", "spark.dynamicAllocation.shuffleTracking.enabled": "true",
           "spark.dynamicAllocation.minExecutors": "0", "spark.dynamicAllocation.initialExecutors": "0",
           "spark.dynamicAllocation.executorIdleTimeout": f"{IDLE_S}s",
           "spark.dynamicAllocation.schedulerBacklogTimeout": "1s", "spark.cores.max": "4"}
ALL_REDUCE = "import torch, torch.distributed as dist\nt = torch.ones(1)\ndist.all_reduce(t)\nt.item()"


@pytest.fixture(scope="module")
def dynamic(tmp_path_factory):
    c = start(tmp_path_factory.mktemp("dynamic-allocation"), workers=1, cores=4, memory="2g")
    kernel = None
    try:
        kernel = kernel_on(c, DYNAMIC)
        yield c, kernel
    finally:
        if kernel is not None:
            kernel.shutdown()
        survivors = stop(c)
        assert not survivors, survivors


def _value(r: dict) -> str:
    return [o["data"]["text/plain"] for o in r["outputs"] if o["output_type"] == "execute_result"][-1]


def _executors_after(kernel: Kernel, want: int, within_s: float) -> float:
    """Seconds until the session has ``want`` executors (polled in the kernel), or fails the test."""
    code = (f"import time as _t\n_t0 = _t.time()\nwhile executors() != {want} and _t.time() - _t0 < {within_s}:\n"
            "    _t.sleep(0.25)\nprint(executors(), round(_t.time() - _t0, 1))")
    got, seconds = kernel.text(kernel.execute(code, timeout=within_s + 60)).split()[-2:]
    assert int(got) == want, f"{got} executors after {seconds} s, wanted {want}"
    return float(seconds)


def test_ranks_run_as_ordinary_tasks_and_idle_executors_go_back(dynamic):
    c, kernel = dynamic
    assert kernel.text(kernel.execute("print(executors())")).strip() == "0"
    r = kernel.execute(f"%%distribute -n 2\n{ALL_REDUCE}", timeout=180)
    assert r["status"] == "ok", kernel.text(r) + c.logs()
    assert _value(r) == "2.0"
    first = r["seconds"]
    assert "dynamic allocation" in kernel.text(kernel.execute("print(jt.last_run().state.backend)"))
    released = _executors_after(kernel, 0, within_s=IDLE_S + 30)
    r = kernel.execute(f"%%distribute -n 2 --all-ranks\n{ALL_REDUCE}", timeout=180)
    assert r["status"] == "ok" and _value(r) == "[2.0, 2.0]", kernel.text(r)
    print(f"dynamic allocation: first run {first:.1f} s from 0 executors; executors back {released:.1f} s after the "
          f"run; second run {r['seconds']:.1f} s")  # the closing note's figures


def test_kept_ranks_hold_their_executors_until_stopped(dynamic):
    c, kernel = dynamic
    r = kernel.execute(f"%%distribute -n 2 --keep\nx = 5\n{ALL_REDUCE}", timeout=180)
    assert r["status"] == "ok" and _value(r) == "2.0", kernel.text(r) + c.logs()
    time.sleep(IDLE_S + 4)  # test-side: past the idle timeout, the kept ranks' executors stay
    assert kernel.text(kernel.execute("print(executors())")).strip() == "2"
    r = kernel.execute("%%distribute -n 2 --keep\nx + 1", timeout=60)
    assert r["status"] == "ok" and _value(r) == "6", kernel.text(r)
    kernel.execute("%distribute_stop")
    _executors_after(kernel, 0, within_s=IDLE_S + 30)


def test_a_killed_rank_task_fails_the_run_and_is_never_run_twice(dynamic, tmp_path):
    c, kernel = dynamic
    cell = textwrap.dedent(f"""\
        %%distribute -n 2
        import os, pathlib, time, torch.distributed as dist
        pathlib.Path({str(tmp_path)!r}, f"rank{{dist.get_rank()}}-{{os.getpid()}}").touch()
        dist.barrier()
        time.sleep(120 if dist.get_rank() == 1 else 0)
        dist.barrier()
    """)
    done: dict[str, dict] = {}
    thread = threading.Thread(target=lambda: done.update(r=kernel.execute(cell, timeout=240)))
    thread.start()
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("rank1-*")) and time.monotonic() < deadline:
        time.sleep(0.2)  # test-side: wait for rank 1 to exist before killing it
    (marker,) = tmp_path.glob("rank1-*")
    os.kill(int(marker.name.split("-")[1]), signal.SIGKILL)
    killed = time.monotonic()
    thread.join()
    r, text = done["r"], kernel.text(done["r"])
    assert r["status"] == "error" and "rank 1" in text and "SIGKILL" in text, text
    print(f"killed rank named {time.monotonic() - killed:.1f} s after the kill")
    time.sleep(3)  # test-side: room for a second attempt of the task to have started a rank, had it done so
    assert len(list(tmp_path.glob("rank1-*"))) == 1 and len(list(tmp_path.glob("rank0-*"))) == 1
    r = kernel.execute(f"%%distribute -n 2\n{ALL_REDUCE}", timeout=180)
    assert r["status"] == "ok" and _value(r) == "2.0", kernel.text(r)


def test_ranks_that_can_never_start_are_said_within_the_bound(dynamic):
    c, kernel = dynamic
    r = kernel.execute(f"%%distribute -n 6 --wait 12\n{ALL_REDUCE}", timeout=180)
    text = kernel.text(r)
    assert r["status"] == "error", text
    assert re.search(r"rank [0-4] failed first: never started", text) and "rank 5: never started" in text, text
    assert re.search(r"never started: no task slot came for its task within 1\d s \([0-4] of 6 ranks started\)",
                     text), text  # 4 cores: never more than 4 of the 6
    assert "maxExecutors" in text and "--wait SECONDS" in text
    assert 12 <= r["seconds"] < 40
    r = kernel.execute(f"%%distribute -n 2\n{ALL_REDUCE}", timeout=180)
    assert r["status"] == "ok" and _value(r) == "2.0", kernel.text(r)


def test_the_torch_distributor_class_and_batches_run_on_dynamic_allocation(dynamic):
    c, kernel = dynamic
    r = kernel.execute(textwrap.dedent("""
        def train():
            import torch, torch.distributed as dist
            t = torch.ones(1); dist.all_reduce(t); return t.item()
        print("TD", jt.TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(train))
        df = spark.range(0, 120, numPartitions=4).selectExpr("id", "cast(id as float) as x")
        def double(pdf):
            pdf = pdf.copy(); pdf["x"] = pdf["x"] * 2; return pdf
    """), timeout=240)
    assert r["status"] == "ok" and "TD 2.0" in kernel.text(r), kernel.text(r) + c.logs()
    r = kernel.execute(textwrap.dedent("""\
        %%distribute -n 2 --all-ranks
        seen = []
        for batch in jt.batches(df, 10, transform=double):
            assert (batch["x"] == 2 * batch["id"]).all()
            seen += batch["id"].tolist()
        sorted(seen)
    """), timeout=240)
    assert r["status"] == "ok", kernel.text(r)
    ids = eval(_value(r))
    assert sorted(ids[0] + ids[1]) == list(range(120))
