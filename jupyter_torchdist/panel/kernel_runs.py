"""This kernel's runs as registry entries: which runs are listed, the cell each came from, its sweep, its links.

Listed: every run and sweep still going, and the last ``KEEP_ENDED`` ended runs and ``KEEP_SWEEPS`` ended sweeps (a
sweep with all its members). The cell of a run is the cell that was executing when the run was submitted (IPython's
``pre_run_cell`` says each cell's id and source as it starts); a sweep member's is its sweep's. Links: where the run
is recorded (``--track``: ``run.tracking``, the MLflow server's run page, W&B's, TensorBoard's folder), the Spark UI
of the session a Spark run used.
"""
from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Mapping
from typing import Any, Final

from ..core.trackers import REGISTRY
from .entries import Cell, first_line, run_entry, sweep_entry
from .registry import RunEntry

__all__ = ["KernelRuns", "latest_frame", "KEEP_ENDED", "KEEP_SWEEPS"]

KEEP_ENDED: Final = 20
KEEP_SWEEPS: Final = 5
KEEP_CELLS: Final = 500


def _driver(run: Any) -> Any:
    ref = getattr(run, "driver", None)
    return ref() if callable(ref) else None


def latest_frame(run: Any) -> Mapping[str, Any] | None:
    """The run's latest snapshot as its view drew it: a sweep member's from its sweep, another's from its view while
    it is driven, an ended run's from its result (its last state, as its report shows it)."""
    sweep = getattr(run, "sweep", None)
    if sweep is not None:
        frame = sweep.members.latest.get(run.number)
    else:
        frame = getattr(getattr(_driver(run), "shown", None), "latest", None)
        state = getattr(run.details, "state", None) if frame is None and run.done() else None
        frame = state.snapshot() if state is not None else frame
    return frame if isinstance(frame, Mapping) else None


def _ui_link(run: Any) -> list[dict[str, str]]:
    """The Spark UI the run's launcher found (none when the UI is off, or the backend has none)."""
    url = getattr(run, "ui_url", None)
    return [{"kind": "spark", "label": "Spark UI", "url": url}] if url else []


TRACKING_LATE_S: Final = 120.0   # an ended run's tracker links may still come (records go every few seconds)


def tracker_links(run: Any) -> list[dict[str, str]]:
    """Where the run is recorded (``run.tracking``): a page to open when the tracker has one (an MLflow server's
    run page, W&B's), else the folder or store (TensorBoard's files, an offline W&B run, a local MLflow store)."""
    try:
        tracked = dict(run.tracking)
    except Exception:
        return []
    links = []
    for kind, ref in tracked.items():
        label = REGISTRY[kind].title if kind in REGISTRY else kind
        if kind == "mlflow":
            from ..tracking.names import tracking_uri

            uri = tracking_uri() or ""
            links.append({"kind": kind, "label": label, "url": f"{uri.rstrip('/')}/#/runs/{ref}"}
                         if uri.startswith(("http://", "https://")) else
                         {"kind": kind, "label": f"{label} run {ref}", "path": uri})
        elif str(ref).startswith(("http://", "https://")):
            links.append({"kind": kind, "label": label, "url": str(ref)})
        else:
            links.append({"kind": kind, "label": label, "path": str(ref)})
    return links


class KernelRuns:
    """What the publisher lists of this kernel's runs; it remembers cells, sweeps and links between ticks."""

    def __init__(self, kernel_id: str, notebook: str | None) -> None:
        self.kernel_id, self.notebook = kernel_id, notebook
        self._cells: list[Cell] = []
        self._lock = threading.Lock()
        self._sweeps: dict[int, tuple[int, Any]] = {}   # id(sweep) -> (its number, the sweep)
        self._final: dict[int, RunEntry] = {}   # ended runs' entries, made once

    # -- cells (IPython's pre_run_cell, on the kernel's main thread) ---------------------------------
    def cell_started(self, info: Any, at: float) -> None:
        cell = Cell(getattr(info, "cell_id", None), first_line(getattr(info, "raw_cell", "")) or "", at)
        with self._lock:
            self._cells.append(cell)
            del self._cells[:-KEEP_CELLS]

    def cell_of(self, at: float) -> Cell | None:
        with self._lock:
            i = bisect.bisect_right([c.at for c in self._cells], at)
            return self._cells[i - 1] if i else None

    # -- the sweeps ------------------------------------------------------------------------------
    def sweep_number(self, sweep: Any) -> int:
        key = id(sweep)
        if key not in self._sweeps:
            self._sweeps[key] = (len(self._sweeps) + 1, sweep)
        return self._sweeps[key][0]

    def sweep_by_id(self, sweep_id: str) -> Any:
        return next((s for _, s in self._sweeps.values() if s.id == sweep_id), None)

    # -- entries ---------------------------------------------------------------------------------
    def entries(self, all_runs: list[Any]) -> list[RunEntry]:
        """Entries of the runs and sweeps to list, oldest first."""
        sweeps: list[Any] = []
        for run in all_runs:
            if run.sweep is not None and all(run.sweep is not s for s in sweeps):
                sweeps.append(run.sweep)
        ended_sweeps = [s for s in sweeps if s.done()][-KEEP_SWEEPS:]
        listed_sweeps = [s for s in sweeps if not s.done() or any(s is e for e in ended_sweeps)]
        singles = [r for r in all_runs if r.sweep is None]
        ended = {id(r) for r in [r for r in singles if r.done()][-KEEP_ENDED:]}
        out: list[RunEntry] = [self._entry(r, None) for r in singles if not r.done() or id(r) in ended]
        for sweep in listed_sweeps:
            number = self.sweep_number(sweep)
            members = [self._entry(r, sweep.id) for r in sweep.runs]
            cell = self.cell_of(sweep.started_at)
            out.append(sweep_entry(sweep, number, members, kernel_id=self.kernel_id, notebook=self.notebook,
                                   cell=cell))
            out.extend(members)
        self.forget({e["number"] for e in out if e["kind"] == "run"})
        return out

    def _entry(self, run: Any, sweep_id: str | None) -> RunEntry:
        """The run's entry; an ended run's is made once (its value's repr, its last state: not redone each tick)."""
        if run.number in self._final:
            return self._final[run.number]
        ended = run.done()
        cell = self.cell_of(run.sweep.started_at if run.sweep is not None else run.submitted_at)
        entry = run_entry(run, latest_frame(run), kernel_id=self.kernel_id, notebook=self.notebook, cell=cell,
                          sweep=sweep_id)
        trackers = tracker_links(run)
        entry["links"] = trackers + _ui_link(run)
        late = run.options.track and len(trackers) < len(run.options.track) and \
            time.time() - (run.ended_at or 0.0) < TRACKING_LATE_S
        if ended and not late:
            self._final[run.number] = entry
        return entry

    def forget(self, keep: set[int]) -> None:
        """Runs no longer listed: their entries and links go."""
        for done in [n for n in self._final if n not in keep]:
            self._final.pop(done, None)
