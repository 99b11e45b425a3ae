"""Sweeps: a cell (or a function) run once per combination of a grid, as background runs, with one comparison view.

``%%distribute -n 2 --sweep "lr=[0.1, 0.01]; batch=[32, 64]"`` and ``jupyter_torchdist.sweep(fn, grid)`` come here.
Every combination is a ``Run`` from the start (queued); the sweep's own thread starts them in the grid's order, at
most ``--concurrent`` at once (default: as many as the backend's task slots hold; with local processes, the cores
divided by the ranks), each waiting its turn for slots as any run does, and redraws the comparison view. A run
that fails is named in the view and the table; the others go on.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from ..core.errors import RunInterrupted
from ..core.grid import Grid, combinations
from ..launchers import backend_for
from ..launchers.limits import check_background
from ..core.options import RunOptions
from ..rank.params import WithGlobals
from .scheduling import ScheduledRun, start_on_thread
from .launch import Work, prepare_background
from .handles import ENDED, Run, background_going
from .sweep_state import metric_of, results_rows, sweep_snapshot

__all__ = ["Sweep", "start_sweep", "sweep_cell", "sweep_function"]

FRAME_S: Final = 0.25   # the comparison view is redrawn at most this often


class _Members:
    """The views of a sweep's runs: each keeps its run's latest snapshot for the comparison view."""

    log_tail = 0  # the comparison view shows no logs (each run's details keep them)
    focus: frozenset[int] = frozenset()

    def __init__(self, changed: Callable[[], None]) -> None:
        self.latest: dict[int, dict[str, Any]] = {}
        self._changed = changed

    def start(self, snapshot: dict[str, Any]) -> None:
        self.update(snapshot)

    def update(self, snapshot: dict[str, Any]) -> None:
        run_id = snapshot.get("run_id")
        if isinstance(run_id, int):
            self.latest[run_id] = snapshot
            self._changed()

    def finish(self, snapshot: dict[str, Any]) -> None:
        self.update(snapshot)


class Sweep:
    """A sweep's handle: ``runs``, ``wait()``, ``results()``, ``best()``, ``stop()``."""

    def __init__(self, title: str, grid: Grid, options: RunOptions, view: Any) -> None:
        self.title, self.grid, self.options = title, grid, options
        self.names = [name for name, _ in grid]
        self.runs: list[Run] = []
        self.started_at = time.time()
        self.concurrent: int | None = options.concurrent
        self.most: int | None = None  # the server's limit on runs at once (launchers/limits.py), if any
        self._view = view
        self._cv = threading.Condition()
        self._pending: list[ScheduledRun] = []
        self._active = 0
        self._stopping: str | None = None
        self._dirty = True
        self._ended = threading.Event()
        self.members = _Members(self._changed)

    # -- what the notebook asks --------------------------------------------------------------------------
    def done(self) -> bool:
        return self._ended.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every run has ended (at most ``timeout`` seconds); True when they have."""
        return self._ended.wait(timeout)

    def rows(self) -> list[dict[str, Any]]:
        """A dict per run: its parameters, state, value (a scalar, or ``value.KEY`` for a small dict), the last
        metrics rank 0 reported, its seconds, its number (``run``) and, for a failed run, why."""
        return results_rows(self.runs, self.members.latest)

    def results(self) -> Any:
        """``rows()`` as a pandas DataFrame, a row per combination in the grid's order."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Sweep.results() makes a pandas DataFrame: `pip install pandas`, or use "
                              "sweep.rows() (a list of dicts)") from None
        return pd.DataFrame(self.rows())

    def best(self, metric: str, mode: str = "min") -> Run:
        """The finished run with the lowest (``mode="min"``) or highest (``"max"``) ``metric``: its value's own
        (a dict's key, or ``"value"`` for a scalar value), else the last value of that metric rank 0 reported."""
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        scored = [(figure, run) for run, row in zip(self.runs, self.rows())
                  if run.state == "done" and (figure := metric_of(row, metric)) is not None]
        if not scored:
            known = sorted({k for row in self.rows() for k in row} - {"state", "seconds", "run", "error", *self.names})
            raise ValueError(f"no finished run has {metric!r} (finished: {sum(r.state == 'done' for r in self.runs)} "
                             f"of {len(self.runs)}); figures the runs have: {', '.join(known) or 'none yet'}")
        pick = min if mode == "min" else max
        return pick(scored, key=lambda item: item[0])[1]

    def stop(self) -> int:
        """Stop every run not yet ended (queued ones never start). Returns how many were stopped."""
        with self._cv:
            self._stopping = self._stopping or "sweep.stop()"
            self._cv.notify_all()
        return sum(run.stop("sweep.stop()") for run in self.runs)

    def snapshot(self) -> dict[str, Any]:
        return dict(sweep_snapshot(self.title, self.names, self.runs, self.members.latest, time.time(),
                                   self.started_at, self.concurrent))

    def __repr__(self) -> str:
        counts = {s: sum(r.state == s for r in self.runs) for s in ("queued", "running", *ENDED)}
        said = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        return f"<Sweep of {len(self.runs)} runs over {', '.join(self.names)}: {said}>"

    # -- the sweep's thread ----------------------------------------------------------------------------------
    def _changed(self) -> None:
        self._dirty = True

    def _start(self, pending: Sequence[ScheduledRun]) -> None:
        self._pending = list(pending)
        self.runs = [d.run for d in pending]
        for run in self.runs:
            run.sweep = self
        self._view.start(self.snapshot())
        threading.Thread(target=self._loop, name="jupyter-torchdist-sweep", daemon=True).start()

    def _loop(self) -> None:
        try:
            self.concurrent = self.concurrent or min(_default_concurrency(self.options), self.most or 1 << 30)
            last = 0.0
            while not all(run.done() for run in self.runs):
                self._launch_what_fits()
                if self._dirty and time.time() - last >= FRAME_S:
                    self._dirty, last = False, time.time()
                    self._view.update(self.snapshot())
                with self._cv:
                    self._cv.wait(FRAME_S)
        finally:
            self._ended.set()
            self._view.finish(self.snapshot())

    def _launch_what_fits(self) -> None:
        with self._cv:
            while self._pending and (self._stopping or self._active < (self.concurrent or 1)):
                d = self._pending.pop(0)
                if self._stopping or d.run.stop_asked:
                    d.run.finish(None, None, RunInterrupted(f"stopped by {self._stopping or d.run.stop_asked} "
                                                            "while queued: no rank had started"))
                    continue
                self._active += 1
                start_on_thread(d, on_end=self._one_ended)
        self._dirty = True

    def _one_ended(self, run: Run) -> None:
        with self._cv:
            self._active -= 1
            self._dirty = True
            self._cv.notify_all()


def _default_concurrency(options: RunOptions) -> int:
    """As many runs at once as the backend's task slots hold; with local processes, the cores over the ranks."""
    try:
        slots = backend_for(options).launcher().capacity().slots
    except Exception:
        slots = None
    return max(1, (slots if slots else os.cpu_count() or 1) // options.n)


def start_sweep(works: Sequence[tuple[Work, dict[str, Any]]], options: RunOptions, grid: Grid, view: Any,
                title: str) -> Sweep:
    """Every combination's run, queued (the first frame of the comparison view drawn here), then started by the
    sweep's thread."""
    most = check_background(background_going(), options.concurrent)
    member_options = replace(options, background=True, sweep=(), concurrent=None, output=None)
    sweep = Sweep(title, grid, options, view)
    sweep.most = most
    pending = [prepare_background(work, member_options, sweep.members, params) for work, params in works]
    sweep._start(pending)
    return sweep


def sweep_cell(fn: Callable[..., Any], options: RunOptions, view: Any, *, title: str, filename: str,
               source: str) -> Sweep:
    """A cell's sweep: each combination's names set as the cell's globals on the ranks."""
    works = [(Work(WithGlobals(fn, params), title=title, filename=filename, source=source), params)
             for params in combinations(options.sweep)]
    return start_sweep(works, options, options.sweep, view, title)


def sweep_function(fn: Callable[..., Any], grid: Grid, options: RunOptions, args: tuple[Any, ...],
                   kwargs: Mapping[str, Any], view: Any) -> Sweep:
    """A function's sweep: each combination given as keyword arguments."""
    title = f"sweep({getattr(fn, '__name__', 'fn')}) -n {options.n}"
    works = [(Work(fn, args, {**kwargs, **params}, title=title), params) for params in combinations(grid)]
    return start_sweep(works, options, grid, view, title)
