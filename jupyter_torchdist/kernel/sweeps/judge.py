"""A sweep's members judged by their metric: each member's steps, best and last value and curve, from its ranks'
reports (rank 0's, or every rank's at the same step reduced with ``--metric-reduce``), and the early-stopping rule
(``early_stop.py``) deciding which to stop. Pure bookkeeping under one lock; the sweep acts on what it says.

Every report reaches the judge as the kernel receives it (the member's supervisor hands it over before anything
else), not at the next frame of the view: a rule decides at the rung step itself, so a member it stops runs past
that step only by the steps already in flight. A member at its last step (``total`` in its report, or
``--max-steps``) is never stopped: it has finished.
"""
from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from typing import Any, Final

from ...core.errors import MemberStoppedEarly
from ...core.brief import evenly
from .early_stop import asha_rungs, make_rule, reduce_ranks
from .study import Member

__all__ = ["Judge", "Verdict", "CURVE_POINTS", "STOPPED_EARLY"]

CURVE_POINTS: Final = 400        # a member's metric curve is kept (and stored) at most this long
STOPPED_EARLY: Final = MemberStoppedEarly.state
Verdict = tuple[str, str]        # (STOPPED_EARLY | "failed", why)
_PENDING_STEPS: Final = 64       # with --metric-reduce: steps kept waiting for every rank's value
_POINTS_PER_TELL: Final = 8      # curve points handed to the search per turn of the sweep (rungs always among them)


class Judge:
    """What the sweep knows of each member's metric, and when its rule stops one."""

    def __init__(self, metric: str, mode: str, early_stop: str, grace: int, metric_reduce: str | None,
                 reduction_factor: int | None = None, max_steps: int | None = None, world_size: int = 1) -> None:
        self.metric, self.mode, self.early_stop, self.grace = metric, mode, early_stop, grace
        self.reduce, self.max_steps, self.world_size = metric_reduce, max_steps, world_size
        self.rule = make_rule(early_stop, mode, grace, metric, reduction_factor, max_steps)
        self._rungs = frozenset(asha_rungs(grace, reduction_factor or 4, max_steps, limit=64)) \
            if early_stop == "asha" else frozenset()
        self._lock = threading.Lock()
        self._judged: set[int] = set()   # members already given a verdict
        self._pending: dict[int, dict[int, dict[int, float]]] = {}   # member -> step -> rank -> value (reduce)
        self._points: dict[int, list[tuple[int, float]]] = {}        # member -> points not yet taken (take_points)
        self._totals: dict[int, int] = {}   # member -> the steps its rank 0 says it runs (report(total=...))
        self._heard: set[int] = set()       # members whose rank 0 has reported the metric

    def replay(self, member: Member) -> None:
        """An earlier kernel's member: its curve counts at the rule's rungs (no verdict on it)."""
        if self.rule is None:
            return
        with self._lock:
            for step, value in member.curve:
                self.rule.observe(member.number, int(step), float(value), final=True)

    def report(self, member: Member, rank: int, msg: Mapping[str, Any]) -> Verdict | None:
        """One report (a PROGRESS message) of one of the member's ranks: record its step and metric; a verdict when
        the rule stops the member (or it passed the first rung without the metric the rule needs)."""
        step = _whole(msg.get("step"))
        raw = _number((msg.get("metrics") or {}).get(self.metric))
        with self._lock:
            if rank == 0 and step is not None and (member.steps is None or step > member.steps):
                member.steps = step
            if rank == 0 and (total := _whole(msg.get("total"))) is not None:
                self._totals[member.number] = total
            if raw is None:
                return self._no_metric(member) if rank == 0 else None
            if rank == 0:
                self._heard.add(member.number)
            value = self._reduced(member.number, rank, step, raw) if self.reduce else raw if rank == 0 else None
            if value is None:
                return None
            self._record(member, step, value)
            if self.rule is None or step is None or member.number in self._judged:
                return None
            total = self._totals.get(member.number)
            why = self.rule.observe(member.number, step, value, final=total is not None and step >= total)
            if why is None:
                return None
            self._judged.add(member.number)
            member.stopped_early_at, member.why = step, why
            return STOPPED_EARLY, why

    def withdraw(self, member: Member) -> None:
        """The member finished before its stop took effect: it ended done, and its row says nothing of a stop."""
        with self._lock:
            member.stopped_early_at = None
            member.why = None

    def take_points(self, member: int) -> list[tuple[int, float]]:
        """The member's curve points since the last call, thinned (its rungs and its latest always kept): what the
        search is told (Optuna's intermediate values)."""
        with self._lock:
            points = self._points.pop(member, [])
        if len(points) <= _POINTS_PER_TELL:
            return points
        rungs = [p for p in points if p[0] in self._rungs]
        others = evenly([p for p in points if p[0] not in self._rungs], max(2, _POINTS_PER_TELL - len(rungs)))
        return sorted(set(rungs) | set(others))

    def _reduced(self, member: int, rank: int, step: int | None, value: float | None) -> float | None:
        """Every rank's value at one step, reduced once the last of them arrives (None until then)."""
        if step is None or value is None:
            return None
        steps = self._pending.setdefault(member, {})
        at = steps.setdefault(step, {})
        at[rank] = value
        if len(at) < self.world_size:
            while len(steps) > _PENDING_STEPS:   # a rank that stopped reporting: its oldest steps are given up
                del steps[min(steps)]
            return None
        for old in [s for s in steps if s <= step]:
            del steps[old]
        return reduce_ranks(list(at.values()), self.reduce or "mean")

    def _record(self, member: Member, step: int | None, value: float) -> None:
        member.last = value
        if math.isfinite(value) and (member.best is None or self._better(value, member.best)):
            member.best = value
        x = float(step if step is not None else len(member.curve))
        if not member.curve or x > member.curve[-1][0]:
            member.curve.append([x, value])
            if len(member.curve) > 2 * CURVE_POINTS:
                member.curve = evenly(member.curve, CURVE_POINTS)
            if step is not None:
                self._points.setdefault(member.number, []).append((step, value))

    def _no_metric(self, member: Member) -> Verdict | None:
        """A rule that never gets its metric cannot judge: a member past its first rung without it fails, saying what
        to report (past, not at: the metric may come in a report of its own at the same step)."""
        if self.rule is None or member.steps is None or member.steps <= self.grace or member.number in self._heard \
                or member.number in self._judged:
            return None
        self._judged.add(member.number)
        every = " (with --metric-reduce, from every rank)" if self.reduce else ""
        why = (f"--early-stop {self.early_stop} judges members by {self.metric!r}, but this member reached step "
               f"{member.steps} (the first rung: --grace {self.grace}) without reporting it. Report it from "
               f"the cell{every} with jupyter_torchdist.report(step=step, {self.metric}=...), or name the metric "
               "the cell reports with --metric NAME")
        member.why = why
        return "failed", why

    def _better(self, a: float, b: float) -> bool:
        return a < b if self.mode == "min" else a > b


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
