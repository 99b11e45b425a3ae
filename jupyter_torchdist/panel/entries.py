"""A run's entry in the registry (``registry.RunEntry``), from its handle and its view's latest frame (the run
snapshot every view draws, ``views.schema.RunSnapshot``). Pure: no I/O, nothing kept; the kernel's publisher calls it.

The handle says what the notebook knows (number, title, state, times, the outcome); the frame what the ranks said
(ranks, hosts, rank 0's step, rate and metrics). A run without a frame yet (queued, or a kernel wired without
frames) still has an entry: the handle's part.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..views.schema import LOSS_KEYS
from .registry import ENDED, RunEntry

__all__ = ["Cell", "run_entry", "sweep_entry", "backend_name", "metric_of", "progress_of", "first_line"]

HOSTS_SHOWN: Final = 8
METRIC_DIGITS: Final = 6


@dataclass(frozen=True)
class Cell:
    """The cell a run was started from: JupyterLab's cell id (when the front end sent one) and its first line."""
    cell_id: str | None
    first_line: str
    at: float


def first_line(text: Any, limit: int = 200) -> str | None:
    if text is None:
        return None
    lines = str(text).strip().splitlines()
    return lines[0][:limit] if lines else ""


def _number(value: Any) -> float | int | str | None:
    """A metric as JSON can hold it: rounded; NaN and infinities as text (as the ranks' reports already say them)."""
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):
        return value
    if not math.isfinite(value):
        return str(value)
    return float(f"{value:.{METRIC_DIGITS}g}")


def metric_of(metrics: Any) -> dict[str, Any] | None:
    """The one metric a row shows: the loss when reported (``LOSS_KEYS``), else the first number."""
    if not isinstance(metrics, Mapping):
        return None
    names = [k for k in LOSS_KEYS if k in metrics] + [k for k in metrics if k not in LOSS_KEYS]
    for name in names:
        value = _number(metrics[name])
        if value is not None:
            return {"name": str(name)[:60], "value": value}
    return None


def backend_name(label: Any) -> str | None:
    """"spark local[4] (embedded)" -> "spark"; "spark connect sc://..." -> "connect"; "local" -> "local"."""
    words = str(label or "").split()
    if not words:
        return None
    return "connect" if words[:2] == ["spark", "connect"] else words[0].lower()


def _rank0(frame: Mapping[str, Any]) -> Mapping[str, Any] | None:
    ranks = frame.get("ranks")
    rows = [r for r in ranks if isinstance(r, Mapping)] if isinstance(ranks, Sequence) else []
    return next((r for r in rows if r.get("rank") == 0), rows[0] if rows else None)


def _median_step(frame: Mapping[str, Any]) -> float | None:
    summary = frame.get("summary")
    quantiles = summary.get("quantiles") if isinstance(summary, Mapping) else None
    for q in quantiles if isinstance(quantiles, Sequence) else ():
        if isinstance(q, Mapping) and q.get("name") == "step" and isinstance(q.get("q"), Sequence) and q["q"]:
            return float(q["q"][len(q["q"]) // 2])
    return None


def progress_of(frame: Mapping[str, Any]) -> dict[str, Any]:
    """Step, total, rate and the latest metric: rank 0's (a many-rank run's step: the median rank's)."""
    r0 = _rank0(frame) or {}
    step = r0.get("step")
    median = _median_step(frame) if frame.get("summary") else None
    return {"step": median if median is not None else _number(step), "total": _number(r0.get("total")),
            "rate": _number(r0.get("rate")), "metric": metric_of(r0.get("metrics"))}


def _hosts(frame: Mapping[str, Any]) -> list[str]:
    summary = frame.get("summary")
    groups = summary.get("hosts") if isinstance(summary, Mapping) else None
    if isinstance(groups, Sequence) and groups:
        names = [str(g.get("host")) for g in groups if isinstance(g, Mapping)]
    else:
        ranks = frame.get("ranks")
        names = [str(r.get("host")) for r in ranks if isinstance(r, Mapping) and r.get("host")] \
            if isinstance(ranks, Sequence) else []
    return sorted(set(names))


def _state(run: Any) -> str:
    state = str(run.state)
    return "stopping" if state in ("queued", "running") and run.stop_asked is not None else state


def _from_frame(entry: RunEntry, frame: Mapping[str, Any]) -> None:
    entry.update(progress_of(frame))  # type: ignore[typeddict-item]
    hosts = _hosts(frame)
    entry["hosts"], entry["host_count"] = hosts[:HOSTS_SHOWN], len(hosts)
    entry["where"], entry["backend"] = frame.get("backend"), backend_name(frame.get("backend"))
    entry["status"] = frame.get("status")
    if entry["state"] == "running" and entry["status"] == "starting":
        entry["state"] = "starting"   # its turn came, its ranks are not up yet
    if isinstance(frame.get("world_size"), int):
        entry["ranks"] = frame["world_size"]


def run_entry(run: Any, frame: Mapping[str, Any] | None, *, kernel_id: str, notebook: str | None,
              cell: Cell | None, sweep: str | None = None) -> RunEntry:
    """The entry of ``run`` (a ``Run`` handle) with its view's latest ``frame`` (None: none yet)."""
    entry: RunEntry = {
        "kind": "run", "id": run.id, "number": run.number, "kernel_id": kernel_id, "notebook": notebook,
        "cell_id": cell.cell_id if cell else None, "cell": first_line(run.title) or "",
        "background": bool(run.background), "detached": bool(getattr(run.options, "detach", False)), "sweep": sweep,
        "params": ", ".join(f"{k}={v}" for k, v in run.params.items())[:200] if run.params else None,
        "backend": None, "where": None, "ranks": int(run.options.n), "hosts": [], "host_count": 0,
        "state": _state(run), "status": None, "step": None, "total": None, "rate": None, "metric": None,
        "submitted": run.submitted_at, "started": run.started_at, "ended": run.ended_at,
        "outcome": first_line(run.summary()) or None, "links": [], "report": None,
    }
    if frame:
        _from_frame(entry, frame)
    return entry


def sweep_entry(sweep: Any, number: int, members: list[RunEntry], *, kernel_id: str,
                notebook: str | None, cell: Cell | None) -> RunEntry:
    """A sweep's own row: its members' states counted, finished members over the trials planned."""
    counts: dict[str, int] = {}
    for m in members:
        counts[m["state"]] = counts.get(m["state"], 0) + 1
    ended = sum(n for s, n in counts.items() if s in ENDED)
    going = any(m["state"] not in ENDED for m in members)
    failed = counts.get("failed", 0) > 0
    state = "running" if going or not sweep.done() else "failed" if failed else \
        "stopped" if counts.get("stopped") else "done"
    return {
        "kind": "sweep", "id": sweep.id, "number": number, "kernel_id": kernel_id, "notebook": notebook,
        "cell_id": cell.cell_id if cell else None, "cell": first_line(sweep.title) or "", "background": True,
        "detached": bool(getattr(sweep.options, "detach", False)), "sweep": None, "params": None,
        "backend": next((m["backend"] for m in members if m.get("backend")), None),
        "where": next((m["where"] for m in members if m.get("where")), None),
        "ranks": int(sweep.options.n), "hosts": [], "host_count": 0, "state": state, "status": None,
        "step": ended, "total": int(getattr(sweep.search, "planned", 0) or len(members)) or None, "rate": None,
        "metric": None, "submitted": sweep.started_at,
        "started": sweep.started_at, "ended": max((m["ended"] or 0.0 for m in members), default=None)
        if not going and sweep.done() else None,
        "outcome": None, "links": [], "report": None, "members": [m["id"] for m in members], "counts": counts,
    }
