"""A many-rank run at a glance: quantiles, hosts, outliers, grouped places and echoes, a compact table (pure).

Above ``MANY_RANKS`` ranks a row per rank is a table nobody can read and a snapshot that grows with N. As Spark's
stage page does for tasks, the snapshot then summarises: every measure as quantiles over the ranks, the loss as a
median in a min-max band, counts by state and by host, the ranks worth a look named with why (failed, paused,
stalled, behind, slowest, waiting on input), where ranks wait grouped by place, and every rank in a few columns for
paging and search. Only featured ranks (failed, outliers, the ones the view asked for) keep a full row.

Everything here is O(N) per snapshot with small constants; nothing is kept between snapshots except the loss band
(``LossBand``, fed by ``RunState.snapshot``).
"""
from __future__ import annotations

import collections
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ...views.schema import (LOSS_KEYS, MANY_RANKS, TABLE_COLUMNS, GroupSnapshot, HostGroupSnapshot, OutlierSnapshot,
    QuantileSnapshot, SummarySnapshot, TableSnapshot)
from ...core.brief import group_texts
from ...core.brief import evenly
from .places import describe
from .rank import RankState
from .resource_use import INPUT_BOUND

__all__ = ["is_many", "LossBand", "summary_snapshot", "rank_table", "featured", "group_texts", "STATES"]

STATES: Final = ("pending", "starting", "running", "done", "failed", "stopped")
OUTLIERS_EACH: Final = 3      # ranks named per kind of outlier
OUTLIERS_MAX: Final = 16      # ... and in all
FAILED_MAX: Final = 8         # failed ranks featured with a full row
METRICS_MAX: Final = 8        # reported metrics summarised as quantiles (besides step and rate)
HOSTS_MAX: Final = 256        # host groups listed
BAND_POINTS: Final = 200      # points of the loss band kept
STALLED_S: Final = 10.0       # a running rank this long in one collective is named as stalled


def is_many(world_size: int) -> bool:
    return world_size > MANY_RANKS


def _loss(r: RankState) -> float | None:
    for key in LOSS_KEYS:
        value = r.metrics.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def _quantiles(values: Sequence[float]) -> list[float]:
    """min, 25th, median, 75th, max (nearest rank) of ``values``, which is not empty."""
    s = sorted(values)
    n = len(s)
    return [_round(s[min(n - 1, max(0, math.ceil(p * n) - 1))]) if p else _round(s[0]) for p in (0, .25, .5, .75, 1)]


def _round(x: float) -> float:
    return float(f"{x:.5g}")


def _median(values: Sequence[float]) -> float | None:
    return _quantiles(values)[2] if values else None


@dataclass
class LossBand:
    """The ranks' latest loss over the run: at each snapshot where the median step moved, [step, min, median, max].
    Kept by the run (a snapshot alone sees only the latest loss of each rank); thinned to ``BAND_POINTS``."""
    points: list[list[float]] = field(default_factory=list)

    def sample(self, ranks: Sequence[RankState]) -> None:
        pairs = [(r.step, loss) for r in ranks if r.step is not None and (loss := _loss(r)) is not None]
        if not pairs:
            return
        step = _median([float(s) for s, _ in pairs])
        q = _quantiles([loss for _, loss in pairs])
        assert step is not None
        if self.points and step <= self.points[-1][0]:
            self.points[-1] = [self.points[-1][0], q[0], q[2], q[4]]  # the latest word at that step
            return
        self.points.append([step, q[0], q[2], q[4]])
        if len(self.points) > 2 * BAND_POINTS:  # thinned in halves: each sample costs O(1) over the run
            self.points = evenly(self.points, BAND_POINTS)


def _measures(ranks: Sequence[RankState]) -> list[QuantileSnapshot]:
    columns: dict[str, list[float]] = collections.defaultdict(list)
    order: list[str] = ["step", "rate", "cpu_pct", "rss", "input_wait"]
    for r in ranks:
        for name, value in (("step", r.step), ("rate", r.rate), ("cpu_pct", r.usage.cpu_pct), ("rss", r.usage.rss),
                            ("input_wait", r.usage.input_wait)):
            if value is not None:
                columns[name].append(float(value))
        for name, value in r.metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                if name not in columns and len(order) < 5 + METRICS_MAX:
                    order.append(name)
                if name in order:
                    columns[name].append(float(value))
    return [{"name": name, "q": _quantiles(columns[name]), "n": len(columns[name])} for name in order if columns[name]]


def _hosts(ranks: Sequence[RankState]) -> list[HostGroupSnapshot]:
    by_host: dict[str, list[RankState]] = collections.defaultdict(list)
    for r in ranks:
        by_host[r.where or "(not yet placed)"].append(r)
    out: list[HostGroupSnapshot] = []
    for host, rs in sorted(by_host.items())[:HOSTS_MAX]:
        steps = [float(r.step) for r in rs if r.step is not None]
        rates = [r.rate for r in rs if r.rate is not None]
        out.append({"host": host, "ranks": len(rs), "counts": dict(collections.Counter(r.state for r in rs)),
                    "step": _median(steps), "rate": _median(rates)})
    return out


def _outliers(ranks: Sequence[RankState], now: float) -> list[OutlierSnapshot]:
    out: list[OutlierSnapshot] = []
    seen: set[int] = set()

    def name(r: RankState, why: str, detail: str) -> None:
        if r.rank not in seen and len(out) < OUTLIERS_MAX:
            seen.add(r.rank)
            out.append({"rank": r.rank, "host": r.where, "why": why, "detail": detail[:300]})

    failed = sorted((r for r in ranks if r.failure is not None and not r.failure.secondary),
                    key=lambda r: (r.failure.at if r.failure else 0.0, r.rank))
    for r in failed[:OUTLIERS_EACH]:
        name(r, "failed", r.failure.summary if r.failure else "")
    for r in [r for r in ranks if r.debug.paused][:OUTLIERS_EACH]:
        name(r, "paused", f"in {r.debug.paused}")
    running = [r for r in ranks if r.state == "running"]
    stuck = sorted(((now - r.debug.collective_since, r) for r in running
                    if r.debug.collective and r.debug.collective_since is not None
                    and now - r.debug.collective_since >= STALLED_S), key=lambda x: (-x[0], x[1].rank))
    for waited, r in stuck[:OUTLIERS_EACH]:
        name(r, "stalled", f"waiting in {r.debug.collective} for {waited:.0f} s")
    steps = [float(r.step) for r in running if r.step is not None]
    median = _median(steps)
    if median is not None:
        behind = sorted((r for r in running if r.step is not None and r.step < median - max(2.0, 0.1 * median)),
                        key=lambda r: (r.step or 0, r.rank))
        for r in behind[:OUTLIERS_EACH]:
            name(r, "behind", f"step {r.step} where the median rank is at {median:g}")
    rates = [r.rate for r in running if r.rate is not None]
    median_rate = _median(rates)
    if median_rate:
        slow = sorted((r for r in running if r.rate is not None and r.rate < 0.8 * median_rate),
                      key=lambda r: (r.rate or 0.0, r.rank))
        for r in slow[:OUTLIERS_EACH]:
            name(r, "slowest", f"{r.rate:.3g} steps/s where the median is {median_rate:.3g}")
    waiting = sorted((r for r in running if (r.usage.input_wait or 0.0) > INPUT_BOUND),
                     key=lambda r: (-(r.usage.input_wait or 0.0), r.rank))
    for r in waiting[:OUTLIERS_EACH]:
        name(r, "waiting on input", f"{(r.usage.input_wait or 0.0):.0%} of its time waiting for batches")
    return out


def _places(ranks: Sequence[RankState]) -> list[GroupSnapshot]:
    said = [(r.rank, text) for r in ranks if r.debug.frames is not None or r.debug.paused
            if (text := describe(r.debug, r.state))]
    return group_texts(said)


def summary_snapshot(ranks: Sequence[RankState], band: LossBand, now: float) -> SummarySnapshot:
    return {"counts": dict(collections.Counter(r.state for r in ranks)), "quantiles": _measures(ranks),
            "loss_band": [list(p) for p in band.points[-BAND_POINTS:]], "hosts": _hosts(ranks),
            "outliers": _outliers(ranks, now), "places": _places(ranks)}


def _cell(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else float(f"{x:.{digits}g}")


def rank_table(ranks: Sequence[RankState]) -> TableSnapshot:
    hosts: dict[str, int] = {}
    states = {s: i for i, s in enumerate(STATES)}
    rows: list[list[Any]] = []
    for r in ranks:
        host = hosts.setdefault(r.where, len(hosts))
        state = states.setdefault(r.state, len(states))
        rows.append([r.rank, host, state, r.step, _cell(r.rate, 3), _cell(_loss(r))])
    return {"columns": list(TABLE_COLUMNS), "hosts": list(hosts), "states": list(states), "rows": rows}


def featured(ranks: Sequence[RankState], summary: SummarySnapshot, focus: Iterable[int]) -> list[RankState]:
    """The ranks that keep a full row: the first failed ones, the outliers and those the view asked for."""
    chosen = {r.rank for r in sorted((r for r in ranks if r.state == "failed"),
                                     key=lambda r: (r.failure.at if r.failure else math.inf, r.rank))[:FAILED_MAX]}
    chosen |= {o["rank"] for o in summary["outliers"]}
    chosen |= {f for f in focus if 0 <= f < len(ranks)}
    return [ranks[i] for i in sorted(chosen)]
