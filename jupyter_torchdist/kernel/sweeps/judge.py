"""A sweep's members judged by their metric: each member's steps, best and last value and curve, from its ranks'
reports (rank 0's, or every rank's reduced with ``--metric-reduce``), and the early-stopping rule
(``pruners.py``) deciding which to stop. Pure bookkeeping under one lock; the sweep acts on what it says.
"""
from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from typing import Any, Final

from ...core.thinning import evenly
from .early_stop import make_pruner, reduce_ranks
from .study import Member

__all__ = ["Judge", "Verdict", "CURVE_POINTS"]

CURVE_POINTS: Final = 400        # a member's metric curve is kept (and stored) at most this long
Verdict = tuple[str, str]        # ("pruned" | "failed", why)


class Judge:
    """What the sweep knows of each member's metric, and when its rule stops one."""

    def __init__(self, metric: str, mode: str, early_stop: str, grace: int, metric_reduce: str | None) -> None:
        self.metric, self.mode, self.early_stop, self.grace = metric, mode, early_stop, grace
        self.reduce = metric_reduce
        self.pruner = make_pruner(early_stop, mode, grace, metric)
        self._lock = threading.Lock()
        self._judged: set[int] = set()   # members already given a verdict

    def replay(self, member: Member) -> None:
        """An earlier kernel's member: its curve counts at the rule's checkpoints (no verdict on it)."""
        if self.pruner is None:
            return
        with self._lock:
            for step, value in member.curve:
                self.pruner.observe(member.number, int(step), float(value))

    def observe(self, member: Member, snapshot: Mapping[str, Any]) -> Verdict | None:
        """One frame of the member's run: record its step and metric; a verdict when its rule stops it."""
        step, value = self._reading(snapshot)
        with self._lock:
            if step is not None and (member.steps is None or step > member.steps):
                member.steps = step
            if value is None:
                return self._no_metric(member)
            self._record(member, step, value)
            if self.pruner is None or step is None or member.number in self._judged:
                return None
            why = self.pruner.observe(member.number, step, value)
            if why is None:
                return None
            self._judged.add(member.number)
            member.pruned_at, member.why = step, why
            return "pruned", why

    def _reading(self, snapshot: Mapping[str, Any]) -> tuple[int | None, float | None]:
        ranks = [r for r in snapshot.get("ranks") or [] if isinstance(r, Mapping)]
        if not ranks:
            return None, None
        step = ranks[0].get("step")
        step = step if isinstance(step, int) and not isinstance(step, bool) else None
        if self.reduce is None:
            return step, _number((ranks[0].get("metrics") or {}).get(self.metric))
        values = [v for r in ranks if (v := _number((r.get("metrics") or {}).get(self.metric))) is not None]
        return step, reduce_ranks(values, self.reduce)

    def _record(self, member: Member, step: int | None, value: float) -> None:
        member.last = value
        if math.isfinite(value) and (member.best is None or self._better(value, member.best)):
            member.best = value
        x = float(step if step is not None else len(member.curve))
        if not member.curve or x > member.curve[-1][0]:
            member.curve.append([x, value])
            if len(member.curve) > 2 * CURVE_POINTS:
                member.curve = evenly(member.curve, CURVE_POINTS)

    def _no_metric(self, member: Member) -> Verdict | None:
        """A rule that never gets its metric cannot judge: the member fails, saying what to report."""
        if self.pruner is None or member.steps is None or member.steps < self.grace or member.last is not None \
                or member.number in self._judged:
            return None
        self._judged.add(member.number)
        why = (f"--early-stop {self.early_stop} judges members by {self.metric!r}, but this member reached step "
               f"{member.steps} (the first checkpoint: --grace {self.grace}) without reporting it. Report it from "
               f"the cell with jupyter_torchdist.report(step=step, {self.metric}=...), or name the metric the cell "
               "reports with --metric NAME")
        member.why = why
        return "failed", why

    def _better(self, a: float, b: float) -> bool:
        return a < b if self.mode == "min" else a > b


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)
