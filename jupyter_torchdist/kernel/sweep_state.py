"""A sweep as its comparison view draws it: one row per run, from each run's latest snapshot. Pure, no I/O.

The view (``views/compare.py``, ``labextension/src/compare.ts``) and the saved sweep report draw the one
``SweepSnapshot`` (``views/schema.py``); ``results_rows`` is the table ``Sweep.results()`` turns into a DataFrame.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..core.grid import describe
from ..core.thinning import evenly
from ..views.schema import SCHEMA_VERSION, SweepRunSnapshot, SweepSnapshot
from .handles import ENDED, Run

__all__ = ["sweep_snapshot", "results_rows", "metric_of", "LOSS_POINTS"]

LOSS_POINTS: Final = 200      # points of a run's loss curve in the comparison view (every run's on one chart)
_SMALL_DICT: Final = 20       # a value that is a dict of at most this many scalars gets a column per key


def sweep_snapshot(title: str, names: Sequence[str], runs: Sequence[Run], latest: Mapping[int, Mapping[str, Any]],
                   now: float, started_at: float, concurrent: int | None) -> SweepSnapshot:
    """The whole sweep: every run's row, and how many are in each state."""
    rows = [_row(run, latest.get(run.id), now) for run in runs]
    counts = {state: sum(1 for r in runs if r.state == state) for state in ("queued", "running", *ENDED)}
    ended = all(r.state in ENDED for r in runs)
    return {
        "version": SCHEMA_VERSION, "title": title, "names": list(names),
        "status": ("failed" if counts["failed"] else "stopped" if counts["stopped"] else "succeeded")
        if ended else "running",
        "elapsed_s": round(max(0.0, now - started_at), 3), "concurrent": concurrent, "counts": counts, "runs": rows,
    }


def _row(run: Run, snap: Mapping[str, Any] | None, now: float) -> SweepRunSnapshot:
    lead = _lead(snap)
    error = (snap or {}).get("error") or {}
    secs = run.seconds()
    return {
        "id": run.id, "params": {k: _plain(v) for k, v in (run.params or {}).items()},
        "label": describe(run.params or {}), "state": run.state,
        "step": lead.get("step"), "total": lead.get("total"), "rate": lead.get("rate"),
        "metrics": dict(lead.get("metrics") or {}), "elapsed_s": None if secs is None else round(secs, 3),
        "loss": _loss(lead), "value_repr": (snap or {}).get("value_repr"),
        "error": ((snap or {}).get("headline") or error.get("summary") or run.summary())
        if run.state in ("failed", "stopped") else None,
    }


def _lead(snap: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """Rank 0's row (the one whose value comes back), or an empty one."""
    ranks = (snap or {}).get("ranks") or []
    return ranks[0] if ranks and isinstance(ranks[0], Mapping) else {}


def _loss(lead: Mapping[str, Any]) -> list[list[float]]:
    points = [p for p in lead.get("loss_history") or [] if isinstance(p, (list, tuple)) and len(p) == 2]
    return [[float(x), float(y)] for x, y in evenly(points, LOSS_POINTS)]


def _plain(value: Any) -> Any:
    """A parameter as JSON can carry it (anything else by its repr)."""
    return value if isinstance(value, (int, float, str, bool)) or value is None else repr(value)


def _scalar(value: Any) -> bool:
    return isinstance(value, (int, float, str, bool)) or value is None or type(value).__name__ in ("float64", "int64")


def _value_columns(run: Run) -> dict[str, Any]:
    """The run's value as columns: ``value`` for a scalar (or a one-element tensor), ``value.k`` for a small dict."""
    if run.state != "done":
        return {}
    value = run.result()
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "numel", lambda: 2)() == 1:
        value = item()
    if _scalar(value):
        return {"value": value}
    if isinstance(value, Mapping) and len(value) <= _SMALL_DICT:
        return {f"value.{k}": v for k, v in value.items() if isinstance(k, str) and _scalar(v)}
    return {}


def results_rows(runs: Sequence[Run], latest: Mapping[int, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per run: its parameters, state, value, last reported metrics (rank 0's), time, number, error."""
    rows = []
    for run in runs:
        lead = _lead(latest.get(run.id))
        row: dict[str, Any] = dict(run.params or {})
        row["state"] = run.state
        row.update(_value_columns(run))
        row.update({k: v for k, v in (lead.get("metrics") or {}).items() if k not in row})
        secs = run.seconds()
        row["seconds"] = None if secs is None else round(secs, 3)
        row["run"] = run.id
        row["error"] = run.summary() if run.state in ("failed", "stopped") else None
        rows.append(row)
    return rows


def metric_of(row: Mapping[str, Any], metric: str) -> float | None:
    """A row's figure for ``best``: the value's own (``value.loss``, or the value when asked for ``value``), else
    the last reported metric of that name."""
    for key in (f"value.{metric}", metric) if metric != "value" else ("value",):
        figure = row.get(key)
        if isinstance(figure, (int, float)) and not isinstance(figure, bool) and math.isfinite(figure):
            return float(figure)
    return None

