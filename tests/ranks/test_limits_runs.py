"""An administrator's limits on real runs: the embedded session's ranks, and background runs at once (a sweep counts
once; its default concurrency stays within the limit)."""
from __future__ import annotations

import time

import pytest

import jupyter_torchdist as jt
from jupyter_torchdist.core.errors import LaunchError


def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@pytest.mark.spark
def test_the_embedded_sessions_ranks_past_the_limit_are_refused(spark, monkeypatch):
    monkeypatch.setenv("JUPYTER_TORCHDIST_MAX_EMBEDDED_RANKS", "2")
    with pytest.raises(LaunchError, match="-n 3 asks for 3 ranks on the embedded local Spark session"):
        jt.run(len, [1], n=3)
    assert jt.run(len, [1, 2], n=2) == 2


def test_background_runs_past_the_limit_are_refused_and_a_sweep_counts_once(monkeypatch):
    left = [r for r in jt.runs() if r.background and not r.done()]
    assert not left, f"runs an earlier test left going count against the limit: {left}"
    monkeypatch.setenv("JUPYTER_TORCHDIST_MAX_BACKGROUND_RUNS", "2")
    first = jt.run(nap, 3.0, n=1, local=True, background=True)
    sweep = jt.sweep(nap, {"seconds": [0.5, 0.5, 0.5]}, n=1, local=True)
    with pytest.raises(LaunchError, match="2 background runs or sweeps of this notebook are going"):
        jt.run(nap, 0.1, n=1, local=True, background=True)
    assert sweep.wait(60) and first.wait(60)
    assert [r.state for r in sweep.runs] == ["done"] * 3 and sweep.concurrent <= 2
    assert jt.run(nap, 0.1, n=1, local=True, background=True).result(timeout=60) == 0.1
