"""Early stopping for a sweep's members (``--early-stop``): which members to stop because their metric is
unpromising, by the rules as Ray Tune and Optuna define them.

Pure rules (no I/O, no threads): the judge feeds each member's metric as it reports it, ``observe`` says whether to
stop that member now and why, in a sentence the results table shows. Two rules:

* ``ASHA`` (asynchronous successive halving, Li et al. 2018; Ray's ``AsyncHyperBandScheduler``, Optuna's
  ``SuccessiveHalvingPruner``): rungs at ``grace * reduction_factor**k``, below ``max_steps`` when it is known; at a
  rung a member goes on only if it is among the best ``1/reduction_factor`` of those recorded there before it, so no
  one waits for a rung to fill.
* ``MedianRule`` (Golovin et al. 2017; Ray's ``MedianStoppingRule``): from ``grace`` on, stop a member whose best
  value is worse than the median of the other members' running averages (from ``grace`` to the same step).

No decision is made at or past ``max_steps`` (nor at a member's last step, ``final``): a member there has finished
its steps, and stopping it would save nothing and call a finished member stopped. The names of the rules and of the
metric reductions are ``core/search_options.py``'s one list each.

Internally every value becomes a *key*, lower is better (``mode="max"`` negates), and a non-finite value (nan, inf)
the worst key, ``inf``: a diverged run never looks good.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import ClassVar, Final, Protocol

from ...core.errors import OptionsError
from ...core.search_options import EARLY_STOPS, REDUCTION_FACTOR, REDUCTIONS, check_rule

__all__ = ["StopRule", "ASHA", "MedianRule", "RULES", "make_rule", "reduce_ranks", "asha_rungs"]

_FRACTION = {2: "half", 3: "third", 4: "quarter", 5: "fifth", 10: "tenth"}
_SHOWN_CHECKPOINTS = 5


class StopRule(Protocol):
    """What the judge asks of an early-stopping rule."""

    def observe(self, member: int, step: int, value: float, final: bool = False) -> str | None:
        """Record member's metric `value` at `step` (steps of one member only grow; repeated or older steps are
        ignored). Returns why to stop it now (a sentence a user reads in the results table), or None to let it
        go on; never a reason when `final` (the member's last step)."""
        ...

    def checkpoints(self) -> tuple[int, ...]:
        """The steps at which decisions are made (for display); open-ended rules give the first few."""
        ...


def asha_rungs(grace: int, reduction: int, max_steps: int | None, limit: int = _SHOWN_CHECKPOINTS) -> tuple[int, ...]:
    """ASHA's rungs, ``grace * reduction**k``: every one below ``max_steps``, or the first ``limit`` when the members'
    length is not known (Ray's rungs from ``grace_period``, ``reduction_factor`` and ``max_t``, the last rung below
    ``max_t``: a member at its last step is not judged)."""
    rungs: list[int] = []
    rung = grace
    while (rung < max_steps) if max_steps is not None else len(rungs) < limit:
        rungs.append(rung)
        rung *= reduction
    return tuple(rungs)


def _check_peers(min_peers: int) -> None:
    if isinstance(min_peers, bool) or not isinstance(min_peers, int) or min_peers < 1:
        raise OptionsError(f"min_peers {min_peers!r}: must be a whole number >= 1")


def _key(value: float, mode: str) -> float:
    """Lower is better; non-finite values are the worst possible, so a diverged member never survives a peer."""
    if not math.isfinite(value):
        return math.inf
    return value if mode == "min" else -value


def _unkey(key: float, mode: str) -> float:
    """A key back in the metric's own units, for the reasons users read."""
    return key if mode == "min" or not math.isfinite(key) else -key


def _quantile(keys: Sequence[float], q: float) -> float:
    """The q quantile of keys by linear interpolation, as ``numpy.percentile(keys, 100 * q)`` (inf-safe)."""
    ordered = sorted(keys)
    pos = q * (len(ordered) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    if ordered[lo] == ordered[hi]:
        return ordered[lo]
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _show(value: float) -> str:
    return f"{value:.4g}"


class ASHA:
    """Asynchronous successive halving with one bracket (Ray Tune's AsyncHyperBandScheduler): a member judged at
    each rung against the values recorded there before it, so nobody waits for a rung to fill."""

    name: ClassVar[str] = "asha"

    def __init__(self, mode: str, grace: int, metric: str = "loss", reduction: int = REDUCTION_FACTOR,
                 max_steps: int | None = None) -> None:
        check_rule(self.name, mode, grace, reduction, max_steps)
        self.mode, self.grace, self.metric, self.reduction = mode, grace, metric, reduction
        self.max_steps = max_steps
        self._rungs: dict[int, list[float]] = {}  # rung -> keys recorded there
        self._last: dict[int, int] = {}  # member -> last step observed
        self._judged: dict[int, set[int]] = {}  # member -> rungs it is recorded at
        self._stopped: set[int] = set()

    def checkpoints(self) -> tuple[int, ...]:
        """The rungs (below --max-steps; without it, the first few)."""
        return asha_rungs(self.grace, self.reduction, self.max_steps)

    def _rung(self, step: int) -> int | None:
        """The highest rung at or below `step` (below max_steps): a member that skipped rungs is judged at the
        latest it passed."""
        if step < self.grace:
            return None
        rung = self.grace
        while rung * self.reduction <= step and (self.max_steps is None or rung * self.reduction < self.max_steps):
            rung *= self.reduction
        return rung if self.max_steps is None or rung < self.max_steps else None

    def observe(self, member: int, step: int, value: float, final: bool = False) -> str | None:
        """Judge `member` at the highest rung `step` passed that it is not yet recorded at, then record it there
        (even when stopping it, so later members are judged against it too). At or past max_steps, or at the
        member's last step, the value is recorded and no one is stopped."""
        if member in self._stopped or step <= self._last.get(member, -math.inf):
            return None
        self._last[member] = step
        rung = self._rung(step)
        judged = self._judged.setdefault(member, set())
        if rung is None or rung in judged:
            return None
        judged.add(rung)
        recorded = self._rungs.setdefault(rung, [])
        key = _key(value, self.mode)
        finished = final or (self.max_steps is not None and step >= self.max_steps)
        reason = self._verdict(rung, step, value, key, recorded) if recorded and not finished else None
        recorded.append(key)
        if reason is not None:
            self._stopped.add(member)
        return reason

    def _verdict(self, rung: int, step: int, value: float, key: float, recorded: list[float]) -> str | None:
        """Go on only within the best 1/reduction of the recorded keys; a non-finite value loses to any finite."""
        cutoff = _quantile(recorded, 1 / self.reduction)
        if math.isinf(key):
            if all(math.isinf(k) for k in recorded):
                return None
        elif key <= cutoff:
            return None
        fraction = _FRACTION.get(self.reduction, f"1/{self.reduction}")
        where = f"step {rung}" if step == rung else f"step {rung} (reported at step {step})"
        return (
            f"ASHA at {where}: {self.metric} {_show(value)} is not in the best {fraction} of the "
            f"{len(recorded) + 1} members that reached step {rung} (cutoff {_show(_unkey(cutoff, self.mode))})"
        )


class MedianRule:
    """The median stopping rule (Ray's MedianStoppingRule): a member whose best so far is worse than what its peers
    typically had from the grace period to the same step is unlikely to catch up."""

    name: ClassVar[str] = "median"

    def __init__(self, mode: str, grace: int, metric: str = "loss", min_peers: int = 3,
                 max_steps: int | None = None) -> None:
        check_rule(self.name, mode, grace, None, max_steps)
        _check_peers(min_peers)
        self.mode, self.grace, self.metric, self.min_peers = mode, grace, metric, min_peers
        self.max_steps = max_steps
        self._steps: dict[int, list[int]] = {}   # member -> its steps, growing
        self._sums: dict[int, list[float]] = {}  # member -> prefix sums of its values, for O(log n) averages
        self._best: dict[int, tuple[float, float]] = {}  # member -> (key, value) of its best so far
        self._stopped: set[int] = set()

    def checkpoints(self) -> tuple[int, ...]:
        """Every step from `grace` on (below max_steps): the first few."""
        end = self.grace + _SHOWN_CHECKPOINTS
        return tuple(range(self.grace, end if self.max_steps is None else min(end, self.max_steps)))

    def observe(self, member: int, step: int, value: float, final: bool = False) -> str | None:
        """Record the value; from `grace` on (below max_steps, before the member's last step), stop the member if
        its best is worse than the peers' median."""
        steps = self._steps.setdefault(member, [])
        if member in self._stopped or (steps and step <= steps[-1]):
            return None
        sums = self._sums.setdefault(member, [])
        steps.append(step)
        sums.append((sums[-1] if sums else 0.0) + value)
        best = min(self._best.get(member, (math.inf, value)), (_key(value, self.mode), value), key=lambda b: b[0])
        self._best[member] = best
        if step < self.grace or final or (self.max_steps is not None and step >= self.max_steps):
            return None
        reason = self._verdict(member, step, best)
        if reason is not None:
            self._stopped.add(member)
        return reason

    def running_average(self, member: int, step: int) -> float | None:
        """The member's average of its values from `grace` to `step` (Ray's running mean), None with none there."""
        steps, sums = self._steps[member], self._sums[member]
        upto, before = bisect.bisect_right(steps, step), bisect.bisect_left(steps, self.grace)
        if upto <= before:
            return None
        total = sums[upto - 1] - (sums[before - 1] if before else 0.0)
        return total / (upto - before)

    def _verdict(self, member: int, step: int, best: tuple[float, float]) -> str | None:
        """Compare against the other members that reported at or past `step`; too few of them: no decision."""
        averages = [_key(a, self.mode) for m, s in self._steps.items()
                    if m != member and s[-1] >= step and (a := self.running_average(m, step)) is not None]
        if len(averages) < self.min_peers:
            return None
        median = _quantile(averages, 0.5)
        diverged = math.isinf(best[0]) and any(math.isfinite(a) for a in averages)
        worse = best[0] > median and not math.isclose(best[0], median, rel_tol=1e-9)  # a tie, up to rounding, is not
        if not (worse or diverged):
            return None
        return (
            f"median rule at step {step}: best {self.metric} {_show(best[1])} is worse than the median "
            f"{_show(_unkey(median, self.mode))} of {len(averages)} other members' running averages from step "
            f"{self.grace} to step {step}"
        )


def make_rule(kind: str, mode: str, grace: int, metric: str = "loss", reduction: int | None = None,
              max_steps: int | None = None, min_peers: int = 3) -> StopRule | None:
    """The rule ``--early-stop KIND`` names, or None for "none"; every argument is checked even then, so a typo is
    caught when written, not when a later change turns early stopping on. ``reduction`` None: ASHA's default."""
    check_rule(kind, mode, grace, reduction, max_steps)
    _check_peers(min_peers)
    if kind == ASHA.name:
        return ASHA(mode, grace, metric, REDUCTION_FACTOR if reduction is None else reduction, max_steps)
    if kind == MedianRule.name:
        return MedianRule(mode, grace, metric, min_peers, max_steps)
    assert kind == EARLY_STOPS[-1]
    return None


RULES: Final = {rule.name: rule for rule in (ASHA, MedianRule)}  # every rule, by the name --early-stop takes


def reduce_ranks(values: Sequence[float], how: str) -> float | None:
    """One metric value from the ranks' values (`--metric-reduce mean|min|max`); None when no rank reported.
    A nan is kept (not skipped), so a rank that diverged makes the member count as diverged."""
    if how not in REDUCTIONS:
        raise OptionsError(f"--metric-reduce must be one of {', '.join(REDUCTIONS)}, got {how!r}")
    if not values:
        return None
    if any(math.isnan(v) for v in values):
        return math.nan
    if how == "mean":
        return sum(values) / len(values)  # not fsum: it refuses inf + -inf, which is nan here
    return min(values) if how == "min" else max(values)
