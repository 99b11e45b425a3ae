"""The runs this kernel has started, oldest first: ``runs()``, a new run's number, the last ended run's result, and
the stop of every run still going when the kernel exits (nothing outlives the kernel: ``stop_all``).
"""
from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Mapping
from typing import Any, Final

from ...core.options import RunOptions
from .run import RunResult
from .run import Run, RunList

__all__ = ["runs", "new_run", "find", "last_background", "last_result", "stop_all", "background_going"]

KEEP_ENDED: Final = 200   # ended runs whose results (logs included) the kernel keeps; older ones drop their result


class _Registry:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.all: list[Run] = []
        self.count = 0
        self.last_ended: RunResult | None = None   # last_run()

    def new(self, title: str, options: RunOptions, params: Mapping[str, Any] | None) -> Run:
        with self.lock:
            self.count += 1
            run = Run(self.count, title, options, params, on_end=self._ended)
            self.all.append(run)
            ended = [r for r in self.all if r.done() and r.details is not None]
            for old in ended[:-KEEP_ENDED]:
                old.forget()
            return run

    def _ended(self, run: Run) -> None:
        if run.details is not None:
            self.last_ended = run.details


_registry = _Registry()


def new_run(title: str, options: RunOptions, params: Mapping[str, Any] | None = None) -> Run:
    """A new run of this kernel, queued (its driver moves it on)."""
    return _registry.new(title, options, params)


def last_result() -> RunResult | None:
    """The result of the run that ended last (``last_run()``), failed runs included."""
    return _registry.last_ended


def runs() -> RunList:
    """This kernel's runs, oldest first (foreground and background, a sweep's each)."""
    with _registry.lock:
        return RunList(_registry.all)


def background_going() -> int:
    """Background runs and sweeps of this kernel that have not ended (a sweep counts once)."""
    going = runs()
    sweeps = {id(r.sweep) for r in going if r.sweep is not None and not r.sweep.done()}
    return sum(1 for r in going if r.background and r.sweep is None and not r.done()) + len(sweeps)


def find(key: int | str) -> Run | None:
    """This kernel's run numbered ``key`` (an int), or whose durable id is ``key`` (a str)."""
    with _registry.lock:
        return next((r for r in _registry.all if (r.number if isinstance(key, int) else r.id) == key), None)


def last_background() -> Run | None:
    """The last background run started (``%distribute_wait`` without a number)."""
    with _registry.lock:
        return next((r for r in reversed(_registry.all) if r.background), None)


def stop_all(by: str, wait_s: float = 5.0) -> None:
    """Stop every run still going and wait (``wait_s`` in all) for them to end."""
    going = [r for r in runs() if not r.done()]
    for run in going:
        run.stop(by)
    deadline = time.time() + wait_s
    for run in going:
        run.wait(max(0.0, deadline - time.time()))


@atexit.register
def _at_exit() -> None:
    """Nothing outlives the kernel: a kernel that exits stops its runs first."""
    try:
        stop_all("the kernel's shutdown")
    except Exception:
        pass
