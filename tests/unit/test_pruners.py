"""The sweep's early-stopping rules (kernel.pruners): pure, so every decision is checked step by step here."""
from __future__ import annotations

import math

import pytest

from jupyter_torchdist.core.errors import OptionsError
from jupyter_torchdist.kernel.sweeps.early_stop import ASHA, MedianRule, make_pruner, reduce_ranks

# Nine members arriving one by one; member i's loss at step s is CONSTANTS[i] / s.
CONSTANTS = [4, 7, 2, 9, 1, 6, 3, 8, 5]


def _run_one_by_one(mode: str) -> tuple[dict[int, int], dict[int, str]]:
    """Each member runs steps 1..9 (until stopped) before the next starts: grace 1, reduction 3 -> rungs 1, 3, 9."""
    pruner = make_pruner("asha", mode, grace=1, reduction=3)
    assert pruner is not None
    sign = 1 if mode == "min" else -1
    stopped_at: dict[int, int] = {}
    reasons: dict[int, str] = {}
    for member, constant in enumerate(CONSTANTS):
        for step in range(1, 10):
            reason = pruner.observe(member, step, sign * constant / step)
            if reason is not None:
                stopped_at[member], reasons[member] = step, reason
                break
    return stopped_at, reasons


def test_asha_stops_the_worse_ones_at_the_first_rung_and_lets_the_best_third_reach_the_next() -> None:
    stopped_at, _ = _run_one_by_one("min")
    # rung 1: 7 > 4 (asynchronous: judged against the one member before it), 9, 6, 8, 5 lose; 4, 2, 1, 3 go on;
    # rung 3: 3 is not within the best third of [4, 2, 1]; 4, 2, 1 reach step 9.
    assert stopped_at == {1: 1, 3: 1, 5: 1, 7: 1, 8: 1, 6: 3}
    assert {0, 2, 4}.isdisjoint(stopped_at)


def test_asha_never_stops_the_best_member() -> None:
    stopped_at, _ = _run_one_by_one("min")
    assert CONSTANTS.index(min(CONSTANTS)) not in stopped_at


def test_asha_mode_max_mirrors_mode_min() -> None:
    assert _run_one_by_one("max")[0] == _run_one_by_one("min")[0]
    _, reasons = _run_one_by_one("max")
    assert reasons[1] == (
        "ASHA at step 1: loss -7 is not in the best third of the 2 members that reached step 1 (cutoff -4)"
    )


def test_asha_judges_a_member_that_skipped_rungs_at_the_highest_milestone_it_passed() -> None:
    pruner = ASHA("min", grace=3, reduction=3)  # rungs 3, 9, 27
    assert pruner.observe(0, 3, 0.1) is None and pruner.observe(0, 9, 0.1) is None
    assert pruner.observe(1, 2, 0.5) is None
    reason = pruner.observe(1, 10, 0.5)
    assert reason is not None and reason.startswith("ASHA at step 9 (reported at step 10): loss 0.5")
    # member 1 was not recorded at rung 3: there 0.2 is judged against 0.1 alone, and stopped
    assert pruner.observe(2, 3, 0.2) is not None


def test_asha_ignores_repeated_and_older_steps() -> None:
    pruner = ASHA("min", grace=3)
    assert pruner.observe(0, 3, 1.0) is None
    assert pruner.observe(0, 3, 9.0) is None  # repeated: not recorded (9.0 would lift the cutoff past 2.0)
    assert pruner.observe(0, 2, 9.0) is None
    assert pruner.observe(1, 3, 2.0) is not None
    assert pruner.observe(1, 3, 2.0) is None  # already stopped, already judged


def test_asha_stops_a_nan_member_at_its_first_rung_when_any_peer_is_finite() -> None:
    pruner = ASHA("min", grace=1)
    assert pruner.observe(0, 1, math.nan) is None  # no one to compare with
    assert pruner.observe(1, 1, math.inf) is None  # all recorded are non-finite: no worse than them
    assert pruner.observe(2, 1, 5.0) is None
    reason = pruner.observe(3, 1, math.nan)
    assert reason is not None and "loss nan" in reason


def test_asha_checkpoints_are_grace_times_powers_of_the_reduction() -> None:
    assert ASHA("min", grace=3, reduction=3).checkpoints()[:3] == (3, 9, 27)


def _peers(rule: MedianRule, count: int, losses: list[float]) -> None:
    for member in range(count):
        for step, loss in enumerate(losses, start=1):
            assert rule.observe(member, step, loss) is None


def test_median_rule_decides_nothing_with_fewer_than_min_peers() -> None:
    rule = MedianRule("min", grace=2, min_peers=3)
    _peers(rule, 2, [4.0, 3.0, 2.0, 1.0])
    assert rule.observe(9, 2, 100.0) is None  # only 2 others reported by step 2
    _peers(rule, 3, [4.0, 3.0, 2.0, 1.0])  # member 2 joins
    assert rule.observe(9, 3, 100.0) is not None


def test_median_rule_stops_a_worse_member_and_keeps_a_better_one() -> None:
    rule = MedianRule("min", grace=2, min_peers=3)
    _peers(rule, 3, [4.0, 3.0, 2.0, 1.0])  # running average to step 2: 3.5
    assert rule.observe(10, 1, 9.0) is None  # before grace
    assert rule.observe(10, 2, 3.4) is None  # 3.4 < 3.5, though worse than the peers' 3.0 at step 2
    assert rule.observe(11, 2, 3.6) is not None
    assert rule.observe(11, 3, 0.1) is None  # stopped once


def test_median_rule_in_mode_max_mirrors_and_stops_nan() -> None:
    rule = MedianRule("max", grace=1, min_peers=3)
    _peers(rule, 3, [0.5, 0.6])
    assert rule.observe(10, 1, 0.9) is None
    assert rule.observe(11, 1, 0.4) is not None
    reason = rule.observe(12, 1, math.nan)
    assert reason is not None and "best loss nan" in reason


def test_the_reasons_name_the_step_the_value_and_the_peer_count() -> None:
    pruner = ASHA("min", grace=9)
    for member, loss in enumerate([0.4, 0.31, 0.2]):  # each better than those before: all go on
        assert pruner.observe(member, 9, loss) is None
    # recorded [0.2, 0.31, 0.4]: the third's cutoff is at 1/3 of the way, i.e. 0.2 + 0.11 * 2/3
    assert pruner.observe(3, 9, 0.52) == (
        "ASHA at step 9: loss 0.52 is not in the best third of the 4 members that reached step 9 (cutoff 0.2733)"
    )
    rule = MedianRule("min", grace=12, metric="val_loss")
    _peers(rule, 5, [0.4] * 12)
    assert rule.observe(9, 12, 0.8) == (
        "median rule at step 12: best val_loss 0.8 is worse than the median 0.4 of 5 other members' "
        "running averages to step 12"
    )


def test_bad_arguments_are_refused_with_what_to_write() -> None:
    with pytest.raises(ValueError, match="asha, median, none"):
        make_pruner("hyperband", "min", 1)
    with pytest.raises(OptionsError, match="grace"):
        make_pruner("asha", "min", 0)
    with pytest.raises(OptionsError, match="reduction"):
        make_pruner("asha", "min", 1, reduction=1)
    with pytest.raises(OptionsError, match="'min'"):
        make_pruner("median", "lowest", 1)
    with pytest.raises(OptionsError, match="min_peers"):
        make_pruner("median", "min", 1, min_peers=0)
    with pytest.raises(OptionsError, match="mean, min, max"):
        reduce_ranks([1.0], "median")
    assert make_pruner("none", "max", 1) is None


def test_reduce_ranks_gives_mean_min_max_none_when_empty_and_keeps_non_finite() -> None:
    assert reduce_ranks([1.0, 2.0, 6.0], "mean") == 3.0
    assert reduce_ranks([1.0, 2.0, 6.0], "min") == 1.0
    assert reduce_ranks([1.0, 2.0, 6.0], "max") == 6.0
    assert reduce_ranks([], "mean") is None
    assert math.isnan(reduce_ranks([1.0, math.nan], "min") or 0.0)
    assert reduce_ranks([1.0, math.inf], "max") == math.inf
