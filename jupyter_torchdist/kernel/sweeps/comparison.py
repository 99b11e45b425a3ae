"""A sweep as its comparison view draws it: one row per run, from each run's latest snapshot. Pure, no I/O.

The view (``views/compare.py``, ``labextension/src/compare.ts``) and the saved sweep report draw the one
``SweepSnapshot`` (``views/schema.py``); ``results_rows`` is the table ``Sweep.results()`` turns into a DataFrame.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypedDict

from ...core.errors import MemberStoppedEarly
from ...core.grid import describe
from ...core.space import IntRange, LogUniform, Space, Uniform
from ...core.brief import evenly
from ...views.schema import SCHEMA_VERSION, SweepRunSnapshot, SweepSnapshot
from ..runs.run import ENDED, Run
from .study import Member

__all__ = ["SweepFacts", "sweep_snapshot", "results_rows", "best_member", "metric_of", "scales", "LOSS_POINTS"]

STOPPED_EARLY: Final = MemberStoppedEarly.state
LOSS_POINTS: Final = 200      # points of a run's loss curve in the comparison view (every run's on one chart)
_SMALL_DICT: Final = 20       # a value that is a dict of at most this many scalars gets a column per key


@dataclass(frozen=True)
class SweepFacts:
    """What the sweep is, as its view's header says it: the metric that judges, the search, the rule, the plan."""
    metric: str = "loss"
    mode: str = "min"
    search: str = "grid"
    early_stop: str = "none"
    trials: int = 0
    space: Space = ()


def sweep_snapshot(title: str, names: Sequence[str], runs: Sequence[Run], latest: Mapping[int, Mapping[str, Any]],
                   now: float, started_at: float, concurrent: int | None, facts: SweepFacts = SweepFacts(),
                   members: Mapping[int, Member] | None = None, past: Sequence[Member] = ()) -> SweepSnapshot:
    """The whole sweep: every member's row (an earlier kernel's first), how many are in each state, which is best
    so far, and how the best figure fell as members ended."""
    members = members or {}
    rows = [_past_row(m, facts.metric) for m in past]
    rows += [_row(run, latest.get(run.number), now, members.get(run.number)) for run in runs]
    states = [r.state for r in runs] + [m.state for m in past]
    counts = {state: states.count(state) for state in ("queued", "running", *ENDED)}
    counts["queued"] += max(0, facts.trials - len(states))   # not drawn yet
    ended = counts["queued"] == 0 and counts["running"] == 0
    finals = _finals(runs, members, past)
    best = _pick(finals, facts.mode)
    return {
        "version": SCHEMA_VERSION, "title": title, "names": list(names),
        "status": ("failed" if counts["failed"] else "stopped" if counts["stopped"] else "succeeded")
        if ended else "running",
        "elapsed_s": round(max(0.0, now - started_at), 3), "concurrent": concurrent, "counts": counts, "runs": rows,
        "metric": facts.metric, "mode": facts.mode, "search": facts.search, "early_stop": facts.early_stop,
        "trials": max(facts.trials, len(states)), "best_id": None if best is None else best[2],
        "scales": scales(facts.space), "best_so_far": _best_so_far(finals, facts.mode),
    }


def _row(run: Run, snap: Mapping[str, Any] | None, now: float, member: Member | None) -> SweepRunSnapshot:
    lead = _lead(snap)
    error = (snap or {}).get("error") or {}
    secs = run.seconds()
    return {
        "id": run.number, "params": {k: _plain(v) for k, v in (run.params or {}).items()},
        "label": describe(run.params or {}), "state": run.state,
        "step": lead.get("step"), "total": lead.get("total"), "rate": lead.get("rate"),
        "metrics": dict(lead.get("metrics") or {}), "elapsed_s": None if secs is None else round(secs, 3),
        "loss": _loss(lead), "value_repr": (snap or {}).get("value_repr"),
        "error": ((snap or {}).get("headline") or error.get("summary") or run.summary())
        if run.state in ("failed", "stopped") else None,
        **_member_fields(member, past=False),
    }


def _past_row(m: Member, metric: str) -> SweepRunSnapshot:
    """A member an earlier kernel ended (a resumed study): what was kept of it."""
    return {
        "id": -m.number, "params": {k: _plain(v) for k, v in m.params.items()}, "label": describe(m.params),
        "state": m.state, "step": m.steps, "total": None, "rate": None,
        "metrics": {} if m.last is None else {metric: m.last},
        "elapsed_s": None if m.seconds is None else round(m.seconds, 3),
        "loss": [[float(x), float(y)] for x, y in evenly(m.curve, LOSS_POINTS)], "value_repr": None,
        "error": m.why if m.state == "failed" else None, **_member_fields(m, past=True),
    }


class _MemberFields(TypedDict):
    stopped_early_at: int | None
    why: str | None
    steps: int | None
    metric_best: float | None
    metric_last: float | None
    past: bool


def _member_fields(m: Member | None, past: bool) -> _MemberFields:
    if m is None:
        return {"stopped_early_at": None, "why": None, "steps": None, "metric_best": None, "metric_last": None,
                "past": past}
    return {"stopped_early_at": m.stopped_early_at, "why": m.why if m.stopped_early_at is not None else None,
            "steps": m.steps,
            "metric_best": _finite(m.best), "metric_last": _finite(m.last), "past": past}


Ending = tuple[float, float, int]   # (ended at, final figure, row id)


def _finals(runs: Sequence[Run], members: Mapping[int, Member], past: Sequence[Member]) -> list[Ending]:
    """(ended at, final figure, row id) of every member that finished with a figure, in the order they ended."""
    out = [(m.ended_at or 0.0, m.final, -m.number) for m in past if m.state == "done" and m.final is not None]
    for run in runs:
        m = members.get(run.number)
        if m is not None and run.state == "done" and m.final is not None:
            out.append((run.ended_at or 0.0, m.final, run.number))
    return sorted(out)


def _pick(finals: Sequence[Ending], mode: str) -> Ending | None:
    if not finals:
        return None
    return (min if mode == "min" else max)(finals, key=lambda f: f[1])


def _best_so_far(finals: Sequence[Ending], mode: str) -> list[list[float]]:
    out: list[list[float]] = []
    for k, (_, figure, _) in enumerate(finals, 1):
        best = figure if not out else (min if mode == "min" else max)(out[-1][1], figure)
        out.append([float(k), best])
    return out


def scales(space: Space) -> dict[str, str]:
    """How the view draws each parameter's axis: log for loguniform (and numbers spanning 100x and more), linear for
    other numbers, category for anything else."""
    out = {}
    for name, entry in space:
        if isinstance(entry, LogUniform):
            out[name] = "log"
        elif isinstance(entry, (Uniform, IntRange)):
            out[name] = "linear"
        elif isinstance(entry, tuple) and entry and all(_real(v) for v in entry):
            low, high = min(entry), max(entry)
            out[name] = "log" if low > 0 and high / low >= 100 else "linear"
        else:
            out[name] = "category"
    return out


def _real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


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


def results_rows(runs: Sequence[Run], latest: Mapping[int, Mapping[str, Any]],
                 members: Mapping[int, Member] | None = None, past: Sequence[Member] = (),
                 metric: str = "loss") -> list[dict[str, Any]]:
    """One row per member (an earlier kernel's first): its parameters, state, steps, the metric's best and last
    values, its value, last reported metrics (rank 0's), time, run number, and why it failed, stopped or was
    stopped early. ``METRIC_final`` is the figure the member finished with (``best()`` and the search use it)."""
    rows = [_past_result(m, metric) for m in past]
    for run in runs:
        lead = _lead(latest.get(run.number))
        m = (members or {}).get(run.number)
        row: dict[str, Any] = dict(run.params or {})
        row["state"] = run.state
        row.update(_value_columns(run))
        row.update({k: v for k, v in (lead.get("metrics") or {}).items() if k not in row})
        row.update(_metric_columns(m, metric))
        row[f"{metric}_final"] = metric_of(row, metric) if run.state == "done" else \
            (_finite(m.last) if m is not None and run.state == STOPPED_EARLY else None)
        secs = run.seconds()
        row["seconds"] = None if secs is None else round(secs, 3)
        row["run"] = run.number
        row["error"] = _why(run, m)
        rows.append(row)
    return rows


def _why(run: Run, m: Member | None) -> str | None:
    """Why a member did not finish: the sweep's own reason in full (its rule's), else the run's headline."""
    if run.state not in ("failed", "stopped", STOPPED_EARLY):
        return None
    headline = str(getattr(run.error, "headline", "") or "")
    if m is not None and m.why and headline.endswith(m.why):
        return headline
    return run.summary()


def _metric_columns(m: Member | None, metric: str) -> dict[str, Any]:
    if m is None:
        return {}
    return {"steps": m.steps, f"{metric}_best": _finite(m.best), f"{metric}_last": _finite(m.last),
            "stopped_early_at": m.stopped_early_at}


def _past_result(m: Member, metric: str) -> dict[str, Any]:
    row: dict[str, Any] = dict(m.params)
    row["state"] = m.state
    row.update(_metric_columns(m, metric))
    row[f"{metric}_final"] = m.final
    row["seconds"] = None if m.seconds is None else round(m.seconds, 3)
    row["run"] = None
    row["error"] = m.why if m.state in ("failed", STOPPED_EARLY) else None
    return row


def best_member(rows: Sequence[Mapping[str, Any]], runs: Sequence[Run], past: Sequence[Member], metric: str,
                mode: str, names: Sequence[str]) -> Any:
    """The finished member (a ``Run``, or an earlier kernel's ``Member``) with the best figure for ``metric``."""
    handles: list[Any] = list(past) + list(runs)
    scored = [(figure, handle) for handle, row in zip(handles, rows)
              if row.get("state") == "done" and (figure := metric_of(row, metric)) is not None]
    if not scored:
        known = sorted({k for row in rows for k in row} - {"state", "seconds", "run", "error", *names})
        finished = sum(row.get("state") == "done" for row in rows)
        raise ValueError(f"no finished member has {metric!r} (finished: {finished} of {len(rows)}); figures the "
                         f"members have: {', '.join(known) or 'none yet'}")
    pick = min if mode == "min" else max
    return pick(scored, key=lambda item: item[0])[1]


def metric_of(row: Mapping[str, Any], metric: str) -> float | None:
    """A row's figure for ``best``: the value's own (``value.loss``, or the value when asked for ``value``), else
    the last reported metric of that name."""
    keys = (f"value.{metric}", f"{metric}_final", metric) if metric != "value" else ("value",)
    for key in keys:
        figure = row.get(key)
        if isinstance(figure, (int, float)) and not isinstance(figure, bool) and math.isfinite(figure):
            return float(figure)
    return None

