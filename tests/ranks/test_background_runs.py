"""Runs at once through the Python API, on both backends: each has its own ranks and channel, they train side by
side (no run waits for another's Spark lane), a stop reaches one run only, and a sweep's runs at once stay within
--concurrent. On Spark, an interrupt cancels the application's other jobs and leaves ours (launchers/interrupts.py)."""
from __future__ import annotations

import contextlib
import signal
import threading
import time

import pytest

import jupyter_torchdist as jt
from jupyter_torchdist.launchers import interrupts


def _span(seconds: float, tag: str) -> tuple[str, float, float, int]:
    import os
    import time

    start = time.time()
    while time.time() - start < seconds:
        time.sleep(0.05)
        jt.report(step=1)
    return tag, start, time.time(), os.getpid()


def test_two_background_runs_train_side_by_side_and_a_stop_reaches_one(backend):
    local = backend == "local"
    a = jt.run(_span, 3.0, "a", n=2, local=local, background=True)
    b = jt.run(_span, 3.0, "b", n=2, local=local, background=True)
    forever = jt.run(_span, 600.0, "c", n=2, local=local, background=True)
    (_, a0, a1, pa), (_, b0, b1, pb) = a.result(timeout=120), b.result(timeout=120)
    assert a0 < b1 and b0 < a1, "the two runs' cells did not overlap: one waited for the other"
    assert pa != pb
    assert forever.state in ("queued", "running") and forever.stop() is True
    assert forever.wait(60) and forever.state == "stopped"
    with pytest.raises(jt.RunInterrupted, match="stopped by run.stop"):
        forever.result()
    assert (a.state, b.state) == ("done", "done")


def test_a_sweep_keeps_to_its_concurrency_and_names_a_failed_run_without_stopping_the_others(backend):
    def cell(width: int, seconds: float) -> float:
        import time

        if width == 3:
            raise ValueError("width 3 is not allowed")
        time.sleep(seconds)
        return width * 10.0

    s = jt.sweep(cell, {"width": [1, 2, 3, 4]}, n=2, local=backend == "local", concurrent=2, seconds=1.0)
    assert s.wait(180)
    rows = s.rows()
    assert [r["state"] for r in rows] == ["done", "done", "failed", "done"]
    assert "ValueError: width 3 is not allowed" in rows[2]["error"]
    spans = [(r.started_at, r.ended_at) for r in s.runs]
    at_once = max(sum(1 for b, e in spans if b <= start < e) for start, _ in spans)
    assert at_once == 2 and s.best("value").params == {"width": 1}


def test_a_sweeps_wait_returns_once_its_view_drew_the_end():
    """The saved comparison is published before ``wait()`` returns: a notebook run headless (nbclient, papermill)
    keeps only what the cell that waits saw, so a last frame drawn after the wait would be lost."""
    from jupyter_torchdist.core.options import RunOptions
    from jupyter_torchdist.kernel.sweeps.start import sweep_function
    from jupyter_torchdist.core.space import check_space

    class SlowView:   # a front end that takes its time to draw the last frame
        log_tail, focus, ended = 0, frozenset(), None

        def start(self, snapshot):
            pass

        def update(self, snapshot):
            pass

        def finish(self, snapshot):
            time.sleep(1.0)
            self.ended = [r["state"] for r in snapshot["runs"]]

    def cell(x: int) -> int:
        return x

    view = SlowView()
    options = RunOptions(n=1, local=True, sweep=check_space({"x": [1, 2]}), background=True)
    s = sweep_function(cell, options, (), {}, view)
    assert s.wait(120) and view.ended == ["done", "done"], view.ended


@pytest.mark.spark
def test_an_interrupt_cancels_the_applications_other_jobs_never_ours(spark):
    sc, ended = spark.sparkContext, {}

    def job(group: str | None) -> None:
        if group:
            sc.setJobGroup(group, "test", interruptOnCancel=True)
        try:
            with interrupts.our_jobs(group) if group else contextlib.nullcontext():
                sc.parallelize(range(1), 1).map(lambda x: __import__("time").sleep(20)).collect()
            ended[group] = "finished"
        except Exception:
            ended[group] = "cancelled"

    threads = [threading.Thread(target=job, args=(g,), daemon=True) for g in ("jupyter-torchdist-test", None)]
    for t in threads:
        t.start()
    deadline = time.time() + 30
    while len(sc.statusTracker().getActiveJobsIds()) < 2 and time.time() < deadline:
        time.sleep(0.1)
    assert len(interrupts.cancel_others()) == 1
    threads[1].join(30)
    assert ended == {None: "cancelled"}
    sc.cancelJobGroup("jupyter-torchdist-test")
    threads[0].join(30)


def test_pysparks_interrupt_handler_gives_way_to_ours():
    def signal_handler(signum, frame):  # stands for pyspark's, which cancels every job of the application
        raise AssertionError("pyspark's handler ran")

    signal_handler.__module__, signal_handler.__qualname__ = "pyspark.core.context", \
        "SparkContext._do_init.<locals>.signal_handler"
    old = signal.signal(signal.SIGINT, signal_handler)
    try:
        assert interrupts.guard_interrupts() is True
        assert signal.getsignal(signal.SIGINT) is interrupts._on_interrupt
        assert interrupts.guard_interrupts() is False  # ours stays
        with pytest.raises(KeyboardInterrupt):
            interrupts._on_interrupt(signal.SIGINT, None)
    finally:
        signal.signal(signal.SIGINT, old)
