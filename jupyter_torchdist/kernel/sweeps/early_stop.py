"""Early stopping for a sweep's members: which runs to stop because their metric is unpromising.

Pure rules (no I/O, no threads): the sweep feeds each member's metric as it reports it, ``observe`` says whether to
stop that member now and why, in a sentence the results table shows. Two rules, as Ray Tune has them:

* ``ASHA`` (asynchronous successive halving, Li et al. 2018): at rungs ``grace * reduction**k`` a member goes on
  only if it is among the best ``1/reduction`` of those that reached the rung before it; no one waits for a full
  rung, so a member is judged against whoever came earlier.
* ``MedianRule`` (Golovin et al. 2017): stop a member whose best value is worse than the median of the other
  members' running averages at the same step.

Internally every value becomes a *key*, lower is better (``mode="max"`` negates), and a non-finite value (nan, inf)
the worst key, ``inf``: a diverged run never looks good.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Protocol

from ...core.errors import OptionsError

__all__ = ["Pruner", "ASHA", "MedianRule", "make_pruner", "reduce_ranks", "KINDS", "REDUCTIONS"]

KINDS = ("asha", "median", "none")
REDUCTIONS = ("mean", "min", "max")
_FRACTION = {2: "half", 3: "third", 4: "quarter", 5: "fifth", 10: "tenth"}
_SHOWN_CHECKPOINTS = 5


class Pruner(Protocol):
    """What the sweep asks of an early-stopping rule."""

    def observe(self, member: int, step: int, value: float) -> str | None:
        """Record member's metric `value` at `step` (steps of one member only grow; repeated or older steps are
        ignored). Returns why to stop it now (a sentence a user reads in the results table), or None to let it
        go on."""
        ...

    def checkpoints(self) -> tuple[int, ...]:
        """The steps at which decisions are made (for display); open-ended rules give the first few."""
        ...


def _check(mode: str, grace: int, reduction: int = 3, min_peers: int = 1) -> None:
    """Refuse bad arguments up front, naming what to write instead: a rule that silently never stops is worse."""
    if mode not in ("min", "max"):
        raise OptionsError(f"mode {mode!r}: write 'min' (lower is better, e.g. loss) or 'max' (e.g. accuracy)")
    for name, got, least in (("grace", grace, 1), ("reduction", reduction, 2), ("min_peers", min_peers, 1)):
        if isinstance(got, bool) or not isinstance(got, int) or got < least:
            raise OptionsError(f"{name} {got!r}: must be a whole number >= {least}")


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


def _median(keys: Sequence[float]) -> float:
    return _quantile(keys, 0.5)


def _show(value: float) -> str:
    return f"{value:.4g}"


class ASHA:
    """Asynchronous successive halving with one bracket (Ray Tune's AsyncHyperBandScheduler): a member judged at
    each rung against the values recorded there before it, so nobody waits for a rung to fill."""

    def __init__(self, mode: str, grace: int, metric: str = "loss", reduction: int = 3) -> None:
        _check(mode, grace, reduction)
        self.mode, self.grace, self.metric, self.reduction = mode, grace, metric, reduction
        self._rungs: dict[int, list[float]] = {}  # milestone -> keys recorded there
        self._last: dict[int, int] = {}  # member -> last step observed
        self._judged: dict[int, set[int]] = {}  # member -> milestones it is recorded at
        self._stopped: set[int] = set()

    def checkpoints(self) -> tuple[int, ...]:
        """The rungs (unbounded): the first few."""
        return tuple(self.grace * self.reduction**k for k in range(_SHOWN_CHECKPOINTS))

    def _milestone(self, step: int) -> int | None:
        """The highest rung at or below `step`: a member that skipped rungs is judged at the latest it passed."""
        if step < self.grace:
            return None
        rung = self.grace
        while rung * self.reduction <= step:
            rung *= self.reduction
        return rung

    def observe(self, member: int, step: int, value: float) -> str | None:
        """Judge `member` at the highest rung `step` passed that it is not yet recorded at, then record it there
        (even when stopping it, so later members are judged against it too)."""
        if member in self._stopped or step <= self._last.get(member, -math.inf):
            return None
        self._last[member] = step
        rung = self._milestone(step)
        judged = self._judged.setdefault(member, set())
        if rung is None or rung in judged:
            return None
        judged.add(rung)
        recorded = self._rungs.setdefault(rung, [])
        key = _key(value, self.mode)
        reason = self._verdict(rung, step, value, key, recorded) if recorded else None
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
    typically had by the same step is unlikely to catch up."""

    def __init__(self, mode: str, grace: int, metric: str = "loss", min_peers: int = 3) -> None:
        _check(mode, grace, min_peers=min_peers)
        self.mode, self.grace, self.metric, self.min_peers = mode, grace, metric, min_peers
        self._history: dict[int, list[tuple[int, float]]] = {}  # member -> [(step, value)], steps growing
        self._sums: dict[int, list[float]] = {}  # member -> prefix sums of its values, for O(log n) averages
        self._best: dict[int, tuple[float, float]] = {}  # member -> (key, value) of its best so far
        self._stopped: set[int] = set()

    def checkpoints(self) -> tuple[int, ...]:
        """Every step from `grace` on: the first few."""
        return tuple(range(self.grace, self.grace + _SHOWN_CHECKPOINTS))

    def observe(self, member: int, step: int, value: float) -> str | None:
        """Record the value; from `grace` on, stop the member if its best is worse than the peers' median."""
        history = self._history.setdefault(member, [])
        if member in self._stopped or (history and step <= history[-1][0]):
            return None
        sums = self._sums.setdefault(member, [])
        history.append((step, value))
        sums.append((sums[-1] if sums else 0.0) + value)
        best = min(self._best.get(member, (math.inf, value)), (_key(value, self.mode), value), key=lambda b: b[0])
        self._best[member] = best
        if step < self.grace:
            return None
        reason = self._verdict(member, step, best)
        if reason is not None:
            self._stopped.add(member)
        return reason

    def _average_to(self, member: int, step: int) -> float:
        """The member's running average of its values up to `step`, as a key."""
        count = bisect.bisect_right(self._history[member], step, key=lambda entry: entry[0])
        return _key(self._sums[member][count - 1] / count, self.mode)

    def _verdict(self, member: int, step: int, best: tuple[float, float]) -> str | None:
        """Compare against the other members that reported at or past `step`; too few of them: no decision."""
        peers = [m for m, h in self._history.items() if m != member and h[-1][0] >= step]
        if len(peers) < self.min_peers:
            return None
        averages = [self._average_to(m, step) for m in peers]
        median = _median(averages)
        diverged = math.isinf(best[0]) and any(math.isfinite(a) for a in averages)
        worse = best[0] > median and not math.isclose(best[0], median, rel_tol=1e-9)  # a tie, up to rounding, is not
        if not (worse or diverged):
            return None
        return (
            f"median rule at step {step}: best {self.metric} {_show(best[1])} is worse than the "
            f"median {_show(_unkey(median, self.mode))} of {len(peers)} other members' running averages to step {step}"
        )


def make_pruner(
    kind: str, mode: str, grace: int, metric: str = "loss", reduction: int = 3, min_peers: int = 3
) -> Pruner | None:
    """The rule `--prune KIND` names, or None for "none"; every argument is checked even then, so a typo is
    caught when written, not when a later change turns pruning on."""
    if kind not in KINDS:
        raise OptionsError(f"unknown pruner {kind!r}: write one of {', '.join(KINDS)}")
    _check(mode, grace, reduction, min_peers)
    if kind == "asha":
        return ASHA(mode, grace, metric, reduction)
    if kind == "median":
        return MedianRule(mode, grace, metric, min_peers)
    return None


def reduce_ranks(values: Sequence[float], how: str) -> float | None:
    """One metric value from the ranks' values (`--metric-reduce mean|min|max`); None when no rank reported.
    A nan is kept (not skipped), so a rank that diverged makes the member count as diverged."""
    if how not in REDUCTIONS:
        raise OptionsError(f"metric reduction {how!r}: write one of {', '.join(REDUCTIONS)}")
    if not values:
        return None
    if any(math.isnan(v) for v in values):
        return math.nan
    if how == "mean":
        return sum(values) / len(values)  # not fsum: it refuses inf + -inf, which is nan here
    return min(values) if how == "min" else max(values)
