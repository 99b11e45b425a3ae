"""Sweeps: a cell (or a function) run once per member of a search, as background runs, with one comparison view.

``%%distribute -n 2 --sweep "lr=loguniform(1e-4, 1e-1)" --trials 16 --early-stop asha`` and
``jupyter_torchdist.sweep(fn, space, trials=16, early_stop="asha")`` come here. The members come from the search
(``search.py``: a grid's combinations, draws from the space, or Optuna's sampler); the sweep's own thread starts
them, at most ``--concurrent`` at once (default: as many as the backend's task slots hold; with local processes, the
cores divided by the ranks), each waiting its turn for slots as any run does. Every report of a member's ranks goes
through the judge (``judge.py``) as the kernel receives it: a member its early-stopping rule stops has its ranks
stopped, ends "stopped_early", and its slots go to the next member; its curve goes to the search as it comes
(Optuna's intermediate values). A member that fails is named in the view and the table; the others go on. With
``--study`` every member is kept in a SQLite file (``study.py``) and the same cell run again goes on where the
search stopped, while the sweep beats there so another kernel on the same study leaves its members be.
"""
from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from ...core.contract import Inbound
from ...core.errors import RunInterrupted
from ...core.options import RunOptions
from ...launchers import backend_for
from ..handle import Handle
from ..runs.run import ENDED, Run
from ..runs.driver import RunDriver, start_on_thread
from .search import Ask, Search
from .study import BEAT_S, Member, StudyStore
from .judge import Judge
from .comparison import SweepFacts, best_member, results_rows, sweep_snapshot

__all__ = ["Sweep", "MakeRun"]

FRAME_S: Final = 0.25   # the comparison view is redrawn at most this often
MakeRun = Callable[[Member], RunDriver]   # a member (its number and parameters) -> its queued run


class _Members:
    """The views of a sweep's runs: each keeps its run's latest snapshot and hands it to the sweep."""

    log_tail = 0  # the comparison view shows no logs (each run's details keep them)
    focus: frozenset[int] = frozenset()

    def __init__(self, on_frame: Callable[[int, dict[str, Any]], None]) -> None:
        self.latest: dict[int, dict[str, Any]] = {}
        self._on_frame = on_frame

    def start(self, snapshot: dict[str, Any]) -> None:
        self.update(snapshot)

    def update(self, snapshot: dict[str, Any]) -> None:
        run_id = snapshot.get("run_id")
        if isinstance(run_id, int):
            self.latest[run_id] = snapshot
            self._on_frame(run_id, snapshot)

    def finish(self, snapshot: dict[str, Any]) -> None:
        self.update(snapshot)


class Sweep(Handle):
    """A sweep's handle: ``runs``, ``state``, ``wait()``, ``result()`` (a row per member), ``results()`` (the same as a
    DataFrame), ``best()``, ``stop()``; ``study`` for Optuna's. A ``Handle``, as each of its runs is."""

    def __init__(self, title: str, options: RunOptions, view: Any, search: Search,
                 store: StudyStore | None = None) -> None:
        super().__init__()
        self.title, self.options, self.space = title, options, options.sweep
        self.grid = options.sweep   # the name earlier releases gave it
        self.names = [name for name, _ in options.sweep]
        self.search, self.store = search, store
        self.study: Any = getattr(search, "study", None)   # Optuna's study (--search optuna), else None
        self.runs: list[Run] = []
        self.past: list[Member] = []          # members an earlier kernel ended (a resumed --study)
        self.member: dict[int, Member] = {}   # by run id
        self.started_at = time.time()
        self.concurrent: int | None = options.concurrent
        self.most: int | None = None  # the server's limit on runs at once (launchers/limits.py), if any
        self.judge = Judge(options.metric, options.mode, options.early_stop, options.grace, options.metric_reduce,
                           options.reduction_factor, options.max_steps, world_size=options.n)
        self._view = view
        self._make: MakeRun = _not_begun
        self._cv = threading.Condition()
        self._pending: list[tuple[Member, RunDriver | None]] = []
        self._numbers = 0   # the highest member number so far (with a study, the file gives the numbers out)
        self._drawn = 0     # members drawn, by this sweep or (a study) by earlier kernels
        self._beat = 0.0
        self._active = 0
        self._stopping: str | None = None
        self._dirty = True
        self.members = _Members(self._on_frame)
        self.recorder: Any = None   # tracking.SweepRecorder: the sweep's parent record (--track, --profile)

    # -- what the notebook asks --------------------------------------------------------------------------
    @property
    def state(self) -> str:
        """running until every member has ended; then done, stopped (``stop()``) or failed (the sweep itself could
        not go on, ``error`` says why: a member that fails does not fail the sweep)."""
        if not self.done():
            return "running"
        return "failed" if self._error is not None else "stopped" if self._stopping else "done"

    def rows(self) -> list[dict[str, Any]]:
        """A dict per member: its parameters, state, steps reached, the metric's best and last values, its value (a
        scalar, or ``value.KEY`` for a small dict), the last metrics rank 0 reported, its seconds, its run number
        (``run``; None for an earlier kernel's member), and for a failed, stopped or stopped-early member why."""
        return results_rows(self.runs, self.members.latest, self.member, self.past, self.options.metric)

    def results(self) -> Any:
        """``rows()`` as a pandas DataFrame, a row per member (an earlier kernel's first), in the order drawn."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Sweep.results() makes a pandas DataFrame: `pip install pandas`, or use "
                              "sweep.rows() (a list of dicts)") from None
        return pd.DataFrame(self.rows())

    def best(self, metric: str | None = None, mode: str | None = None) -> Any:
        """The finished member with the best ``metric`` (default: the sweep's ``--metric``/``--mode``): its value's
        own (a dict's key, or ``"value"`` for a scalar value), else the last value of that metric rank 0 reported.
        A ``Run``, or for a member an earlier kernel ran (a resumed study) its kept ``Member``."""
        metric, mode = metric or self.options.metric, mode or self.options.mode
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        return best_member(self.rows(), self.runs, self.past, metric, mode, self.names)

    @property
    def tracking(self) -> dict[str, str]:
        """Where the sweep's parent run is recorded (``--track``), tracker by tracker, once each has it (each
        member's is its own ``Run.tracking``); empty when the sweep is not tracked."""
        if self.recorder is None or not self.options.track:
            return {}
        from ...tracking import tracking

        return tracking(self.recorder.key)

    @property
    def mlflow_run_id(self) -> str | None:
        """The sweep's parent run in MLflow (``tracking["mlflow"]``; each member's is its ``Run.mlflow_run_id``):
        its id once the tracking server has it, None before, or when the sweep is not tracked in MLflow."""
        return self.tracking.get("mlflow")

    def stop(self, by: str = "sweep.stop()") -> bool:
        """Stop every member not yet ended (queued ones never start, none is drawn any more). Returns at once, True
        when something was still going; ``wait()`` for the end."""
        with self._cv:
            going = not self.done() and not self._stopping
            self._stopping = self._stopping or by
            self._cv.notify_all()
        stopped = [run.stop(by) for run in self.runs]
        return any(stopped) or going

    def _value(self) -> Any:
        return self.rows()

    def _name(self) -> str:
        return f"the sweep over {', '.join(self.names)}"

    def snapshot(self) -> dict[str, Any]:
        facts = SweepFacts(self.options.metric, self.options.mode, self.search.kind, self.options.early_stop,
                           self.search.planned, self.options.sweep)
        return dict(sweep_snapshot(self.title, self.names, self.runs, self.members.latest, time.time(),
                                   self.started_at, self.concurrent, facts, self.member, self.past))

    def __repr__(self) -> str:
        states = [r.state for r in self.runs] + [m.state for m in self.past]
        said = ", ".join(f"{n} {s}" for s in ("queued", "running", *ENDED) if (n := states.count(s)))
        return f"<Sweep {self.id} of {self.search.planned} members over {', '.join(self.names)}: {said or 'none yet'}>"

    # -- the members' frames and reports ---------------------------------------------------------------
    def _on_frame(self, run_id: int, snapshot: Mapping[str, Any]) -> None:
        self._dirty = True

    def _on_report(self, member: Member, run: Run, ev: Inbound) -> None:
        """A report of one of the member's ranks, on its supervisor's thread as it arrives: the judge's at once, so
        a rule decides at the rung step itself. Never raises (it runs inside the member's run)."""
        try:
            verdict = self.judge.report(member, ev.rank, ev.msg)
        except Exception:
            return
        if verdict is not None:
            run.end_early(*verdict)

    # -- the sweep's thread ----------------------------------------------------------------------------------
    def begin(self, make: MakeRun, past: list[Member], again: list[Member], drawn: int = 0) -> None:
        """Queue the members (the search's, if it knows them ahead; an earlier kernel's unfinished ones first),
        draw the first frame, and start the sweep's thread. ``drawn``: members earlier kernels drew (a study)."""
        self._make = make
        self.past = past
        for member in past:
            self.judge.replay(member)
        self._numbers = max([m.number for m in past + again], default=0)
        self._drawn = max(drawn, len(past) + len(again))
        for member in again:
            self._queue(member)
        while self.search.eager and (ask := self.search.ask()) is not None:
            self._queue(self._new_member(ask))
        self._view.start(self.snapshot())
        threading.Thread(target=self._loop, name="jupyter-torchdist-sweep", daemon=True).start()

    def _new_member(self, ask: Ask) -> Member:
        """A member the search drew, numbered after every member drawn (by any kernel, with a study)."""
        self._drawn += 1
        member = Member(self._numbers + 1, dict(ask.params), token=ask.token)
        if self.store is not None:
            try:
                self.store.insert(member)
            except Exception:
                pass   # a full disk loses the record, never the run
        self._numbers = max(self._numbers, member.number)
        return member

    def _queue(self, member: Member) -> None:
        d = self._make(member) if self.search.eager else None
        if d is not None:
            self._adopt(member, d)
        self._pending.append((member, d))

    def _adopt(self, member: Member, d: RunDriver) -> None:
        d.run.sweep = self
        d.listener = functools.partial(self._on_report, member, d.run)
        self.member[d.run.number] = member
        self.runs.append(d.run)
        self._save(member)

    def _loop(self) -> None:
        try:
            self.concurrent = self.concurrent or min(_default_concurrency(self.options), self.most or 1 << 30)
            last = 0.0
            while not self._finished():
                try:
                    self._launch_what_fits()
                except Exception as exc:  # a member that cannot be made (its cell does not pack): none more start
                    self._error = exc   # the queued ones end "stopped" at the next turn of the loop
                    with self._cv:
                        self._stopping = self._stopping or f"an error of the sweep's ({exc})"
                self._tell_curves()
                if self._dirty and time.time() - last >= FRAME_S:
                    self._dirty, last = False, time.time()
                    self._view.update(self.snapshot())
                with self._cv:
                    self._cv.wait(FRAME_S)
        finally:
            self._record_end()
            if self.store is not None:   # before anyone waiting wakes: its unfinished members are a next sweep's
                self.store.close()
            try:   # its saved comparison is in the notebook before anyone waiting on it wakes: a notebook run
                self._view.finish(self.snapshot())   # headless (nbclient, papermill) keeps only what a cell's
            finally:                                 # execution saw
                self._end()

    def _record_end(self) -> None:
        if self.recorder is None:
            return
        try:
            self.recorder.end(self.rows(), self._stopping is not None)
        except Exception as exc:  # tracking never costs the sweep its end
            print(f"jupyter-torchdist warning: the sweep could not be recorded: {type(exc).__name__}: {exc}",
                  file=sys.stderr)

    def _finished(self) -> bool:
        with self._cv:
            more = bool(self._pending) or (not self.search.eager and not self._stopping and self._can_ask())
            return not more and self._active == 0 and all(run.done() for run in self.runs)

    def _can_ask(self) -> bool:
        return self._drawn < self.search.planned

    def _tell_curves(self) -> None:
        """Each running member's new curve points to the search (Optuna's intermediate values, as they come), and
        every few seconds the sweep's heartbeat: in the study file, and Optuna's for its running trials."""
        for run in list(self.runs):
            member = self.member.get(run.number)
            if member is not None and run.state == "running":
                self._tell_points(member)
        if time.time() - self._beat < BEAT_S:
            return
        self._beat = time.time()
        for beat in (self.search.beat, self.store.beat if self.store is not None else None):
            try:
                if beat is not None:
                    beat()
            except Exception:
                pass   # a busy or full disk misses a beat, never the run

    def _tell_points(self, member: Member) -> None:
        try:
            self.search.report(member.token, self.judge.take_points(member.number))
        except Exception:
            pass   # the search's bookkeeping never ends the sweep

    def _launch_what_fits(self) -> None:
        with self._cv:
            while self._stopping or self._active < (self.concurrent or 1):
                nxt = self._next()
                if nxt is None:
                    break
                member, d = nxt
                if self._stopping or d.run.stop_asked:
                    d.run.finish(None, None, RunInterrupted(f"stopped by {self._stopping or d.run.stop_asked} "
                                                            "while queued: no rank had started"))
                    self._ended_member(d.run)
                    continue
                self._active += 1
                member.state = "running"
                self._save(member)
                start_on_thread(d, on_end=self._one_ended)
        self._dirty = True

    def _next(self) -> tuple[Member, RunDriver] | None:
        """The next member to start: a queued one, else (Optuna's) one asked for now."""
        while self._pending:
            member, d = self._pending.pop(0)
            if d is None and self._stopping:   # an earlier kernel's member not run again: it stays to do
                continue
            if d is None:   # an earlier kernel's member, run again under a search that asks as it goes
                member.token = self.search.again(member.params, member.token).token
                d = self._make(member)
                self._adopt(member, d)
            return member, d
        if self.search.eager or self._stopping or not self._can_ask():
            return None
        ask = self.search.ask()
        if ask is None:
            return None
        member = self._new_member(ask)
        d = self._make(member)
        self._adopt(member, d)
        return member, d

    def _one_ended(self, run: Run) -> None:
        self._ended_member(run)
        with self._cv:
            self._active -= 1
            self._dirty = True
            self._cv.notify_all()

    def _ended_member(self, run: Run) -> None:
        """A member's end: kept, and told to the search (the rest of its curve, and its final metric; Optuna learns
        from both). A member its rule judged but that finished before the stop reached it ended done: the verdict
        is withdrawn (a member that finished all its steps is never called stopped early)."""
        member = self.member.get(run.number)
        if member is None:
            return
        if run.state == "done" and member.stopped_early_at is not None:
            self.judge.withdraw(member)
        self._tell_points(member)
        row = results_rows([run], self.members.latest, self.member, [], self.options.metric)[0]
        member.state, member.seconds, member.ended_at = run.state, run.seconds(), run.ended_at
        final = row.get(f"{self.options.metric}_final")
        member.final = final if isinstance(final, float) else None
        try:
            self.search.tell(member.token, run.state, member.final)
        except Exception:
            pass  # the search's bookkeeping never ends the sweep; the member's row has its end
        self._save(member)
        self._redisplay()   # its line in the notebook counts the members' states

    def _save(self, member: Member) -> None:
        if self.store is not None:
            try:
                self.store.save(member)
            except Exception:
                pass  # a full disk loses the record, never the run


def _not_begun(member: Member) -> RunDriver:
    raise RuntimeError("Sweep.begin() makes the members' runs")


def _default_concurrency(options: RunOptions) -> int:
    """As many runs at once as the backend's task slots hold; with local processes, the cores over the ranks."""
    try:
        slots = backend_for(options).launcher().capacity().slots
    except Exception:
        slots = None
    return max(1, (slots if slots else os.cpu_count() or 1) // options.n)

