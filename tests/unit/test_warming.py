"""Unit: which runs go to local processes while the embedded session starts (launchers.stand_in)."""
from __future__ import annotations

import threading

from jupyter_torchdist.launchers import backend_for, stand_in
from jupyter_torchdist.launchers.session import embedded as spark_session, notebook
from jupyter_torchdist.core.options import RunOptions


def test_only_runs_that_need_nothing_of_spark_go_local_and_only_while_it_starts(monkeypatch):
    release = threading.Event()
    warm = threading.Thread(target=release.wait, daemon=True)
    warm.start()
    monkeypatch.setattr(spark_session, "_warm_thread", warm)
    monkeypatch.setattr(spark_session, "warming", spark_session.warming)
    # the notebook has no session of its own (this test process may hold one another test built)
    monkeypatch.setattr(notebook, "own_classic_session", lambda: None)
    try:
        assert backend_for(RunOptions(n=2)).name == "local" and stand_in(RunOptions(n=2)) == "warming"
        local = RunOptions(n=2, local=True)
        assert backend_for(local).name == "local" and stand_in(local) is None
        assert backend_for(RunOptions(n=2, spark_tasks=True)).name == "spark"  # TorchDistributor on Spark waits
    finally:
        release.set()
        warm.join()
    assert stand_in(RunOptions(n=2)) is None  # the session is up (or failed): runs go to it


class _Zygote:
    """The process server as the warm-up sees it: busy while a run's ranks are registered with it."""

    def __init__(self, busy_from: float, busy_until: float) -> None:
        import time

        self.began = time.monotonic()
        self.busy_from, self.busy_until = busy_from, busy_until

    def busy(self) -> bool:
        import time

        return self.busy_from <= time.monotonic() - self.began < self.busy_until


def _waited(zygote: _Zygote) -> float:
    import time

    from jupyter_torchdist.launchers.session import autostart

    began = time.monotonic()
    autostart._after_the_first_run(zygote)
    return time.monotonic() - began


def test_the_jvm_waits_for_the_first_run_to_end_and_no_longer(monkeypatch):
    from jupyter_torchdist.launchers.session import autostart

    # the run registers a moment after it asked, and ends 0.6 s later: the JVM starts then
    assert 0.55 < _waited(_Zygote(0.05, 0.65)) < 5.0  # upper bounds loose: a loaded CI machine
    # no run registers within a quarter second: the JVM does not wait for one
    assert _waited(_Zygote(10, 20)) < 5.0  # FIRST_RUN_S is 10
    # a run that goes on (a long first cell, kept ranks): the JVM starts after FIRST_RUN_S anyway
    monkeypatch.setattr(autostart, "FIRST_RUN_S", 0.5)
    assert 0.45 < _waited(_Zygote(0, 60)) < 5.0
