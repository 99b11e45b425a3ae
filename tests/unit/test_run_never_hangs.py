"""No run waits for ever: a launcher that fails while a run is queued or starting (its probe, its slot count, its
session gone) ends that run with the error, and ``Run.wait``, sweeps and the next runs see it end. No ranks start:
each failure is injected where the driver asks the launcher layer."""
from __future__ import annotations

import pytest

import jupyter_torchdist as jt
from jupyter_torchdist.core.errors import LaunchError
from jupyter_torchdist.kernel.runs import driver
from jupyter_torchdist.kernel.runs.history import runs


class Broken(RuntimeError):
    pass


@pytest.fixture
def probe_fails(monkeypatch):
    """The backend's probe raises (a Spark Connect session gone, a registry claim that cannot decide)."""
    def broken(options):
        raise Broken("the backend's probe failed: session gone")
    monkeypatch.setattr(driver, "launcher_for", broken)


def test_a_background_run_whose_probe_fails_ends_with_that_error(probe_fails):
    run = jt.run(len, [1], n=2, local=True, background=True)
    assert run.wait(timeout=10), f"still {run.state}"
    assert run.state == "failed"
    with pytest.raises(Broken, match="session gone"):
        run.result(timeout=1)


def test_a_foreground_run_whose_probe_fails_raises_and_is_not_left_queued(probe_fails):
    with pytest.raises(Broken):
        jt.run(len, [1], n=2, local=True)
    assert runs()[-1].state == "failed" and runs()[-1].done()


def test_a_sweep_whose_probe_fails_ends_every_member(probe_fails):
    sweep = jt.sweep(lambda lr: lr, {"lr": [0.1, 0.2, 0.3]}, n=1, local=True, concurrent=2)
    assert sweep.wait(timeout=10), [r.state for r in sweep.runs]
    assert [r.state for r in sweep.runs] == ["failed"] * 3


def test_a_slot_count_that_fails_while_the_run_waits_ends_it(monkeypatch):
    """The run queues behind another holder; then reading the backend's slots raises."""
    from jupyter_torchdist.kernel.runs.turns import Ticket, turns

    holder = Ticket(-1, 1, "broken-pool")
    assert turns.wait(holder, lambda: 1) == "go"

    def slots(self):
        def capacity() -> int:
            raise LaunchError("the session's slots could not be read: its JVM is gone")
        return [driver.Pool(Ticket(self.run.number, 1, "broken-pool"), capacity)]

    monkeypatch.setattr(driver.RunDriver, "_slots", slots)
    try:
        run = jt.run(len, [1], n=1, local=True, background=True)
        assert run.wait(timeout=10), f"still {run.state}"
        with pytest.raises(LaunchError, match="JVM is gone"):
            run.result(timeout=1)
    finally:
        turns.release(holder)
    assert turns.holders("broken-pool") == [], "the failed run holds no place"
