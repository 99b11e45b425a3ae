"""The kernel's interrupt cancels the application's other Spark jobs, never ours, and never every job: a fake
SparkContext stands for pyspark's (the real one: ranks/test_background_runs.py and the kernel tests)."""
from __future__ import annotations

import sys
import types

import pytest

from jupyter_torchdist.launchers import interrupts


class _Tracker:
    def __init__(self, groups: dict[str, list[int]], active: list[int], broken: bool = False) -> None:
        self.groups, self.active, self.broken = groups, active, broken

    def getActiveJobsIds(self) -> list[int]:
        if self.broken:
            raise RuntimeError("py4j: the status tracker is gone")
        return self.active

    def getJobIdsForGroup(self, group: str) -> list[int]:
        return self.groups.get(group, [])


class _Context:
    def __init__(self, tracker: _Tracker) -> None:
        self.tracker, self.cancelled, self.all_cancelled = tracker, [], False
        self._jsc = types.SimpleNamespace(sc=lambda: types.SimpleNamespace(cancelJob=self.cancelled.append))

    def statusTracker(self) -> _Tracker:
        return self.tracker

    def cancelAllJobs(self) -> None:
        self.all_cancelled = True


@pytest.fixture
def context(monkeypatch):
    def make(tracker: _Tracker) -> _Context:
        sc = _Context(tracker)
        pyspark = types.SimpleNamespace(SparkContext=types.SimpleNamespace(_active_spark_context=sc))
        monkeypatch.setitem(sys.modules, "pyspark", pyspark)
        return sc
    return make


def test_only_jobs_outside_our_groups_are_cancelled(context):
    sc = context(_Tracker({"jupyter-torchdist-run-7": [3, 4], "jupyter-torchdist-data-2": [5]}, [3, 4, 5, 6, 9]))
    with interrupts.our_jobs("jupyter-torchdist-run-7"), interrupts.our_jobs("jupyter-torchdist-data-2"):
        assert interrupts.cancel_others() == [6, 9]
    assert sc.cancelled == [6, 9] and not sc.all_cancelled


def test_a_group_no_longer_running_is_not_ours_any_more(context):
    sc = context(_Tracker({"jupyter-torchdist-run-7": [3]}, [3]))
    with interrupts.our_jobs("jupyter-torchdist-run-7"):
        pass
    assert interrupts.cancel_others() == [3] and sc.cancelled == [3]


def test_when_spark_cannot_say_whose_jobs_run_none_is_cancelled(context):
    sc = context(_Tracker({}, [1, 2], broken=True))
    assert interrupts.cancel_others() == []
    assert sc.cancelled == [] and not sc.all_cancelled, "never every job (background runs, sweeps, kept ranks)"
