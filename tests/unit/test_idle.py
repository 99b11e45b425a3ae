"""The idle release's clock (kernel/runs/idle.py): when it releases, that it retries what was busy, and that a cell
brings back what went. Real threads, no kernel: the releasing and the bringing back are the test's."""
from __future__ import annotations

import threading

from jupyter_torchdist.kernel.runs.idle import IDLE_ENV, IdleWatch, idle_seconds


def _watch(seconds: float, busy=lambda: False, gives=("the local process server",)):
    calls = {"release": 0, "rewarm": threading.Event()}

    def release() -> list[str]:
        calls["release"] += 1
        return list(gives)

    watch = IdleWatch(lambda: seconds, busy, release, calls["rewarm"].set)
    watch.stop()  # the test drives check() itself
    return watch, calls


def test_it_releases_once_after_the_idle_time_and_a_cell_brings_it_back():
    watch, calls = _watch(10.0)
    assert watch.check(watch.last + 9.9) is None and calls["release"] == 0
    assert watch.check(watch.last + 10.0) == ["the local process server"]
    assert watch.check(watch.last + 30.0) is None and calls["release"] == 1, "once per idle spell"
    watch.touch()
    assert calls["rewarm"].wait(2), "the next cell brings back what went"
    assert watch.released is None


def test_nothing_while_busy_nothing_when_off_and_a_release_that_gave_nothing_is_tried_again():
    busy = threading.Event()
    busy.set()
    watch, calls = _watch(1.0, busy=busy.is_set)
    assert watch.check(watch.last + 5) is None and calls["release"] == 0
    busy.clear()
    empty, empty_calls = _watch(1.0, gives=())
    assert empty.check(empty.last + 5) == [] and empty.check(empty.last + 10) == [] and empty_calls["release"] == 2
    off, off_calls = _watch(0.0)
    assert off.check(off.last + 10_000) is None and off_calls["release"] == 0


def test_the_environment_wins_over_the_configuration(monkeypatch):
    monkeypatch.delenv(IDLE_ENV, raising=False)
    assert idle_seconds(600.0) == 600.0
    monkeypatch.setenv(IDLE_ENV, "30")
    assert idle_seconds(600.0) == 30.0
    monkeypatch.setenv(IDLE_ENV, "soon")
    assert idle_seconds(120.0) == 120.0
