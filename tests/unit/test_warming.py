"""Unit: which runs go to local processes while the embedded session starts (launchers.stand_in)."""
from __future__ import annotations

import threading

from jupyter_torchdist.launchers import backend_for, stand_in
from jupyter_torchdist.launchers.session import embedded as spark_session
from jupyter_torchdist.core.options import RunOptions


def test_only_runs_that_need_nothing_of_spark_go_local_and_only_while_it_starts(monkeypatch):
    release = threading.Event()
    warm = threading.Thread(target=release.wait, daemon=True)
    warm.start()
    monkeypatch.setattr(spark_session, "_warm_thread", warm)
    monkeypatch.setattr(spark_session, "warming", spark_session.warming)
    try:
        assert backend_for(RunOptions(n=2)).name == "local" and stand_in(RunOptions(n=2)) == "warming"
        local = RunOptions(n=2, local=True)
        assert backend_for(local).name == "local" and stand_in(local) is None
        assert backend_for(RunOptions(n=2, spark_tasks=True)).name == "spark"  # TorchDistributor on Spark waits
    finally:
        release.set()
        warm.join()
    assert stand_in(RunOptions(n=2)) is None  # the session is up (or failed): runs go to it
