"""The sweep's early-stopping rules (kernel/sweeps/early_stop.py) as Ray Tune and Optuna define them: ASHA's rungs
from the grace period, reduction factor and max steps, the median rule averaging from the grace period, no decision
at a member's last step; pure, so every decision is checked step by step here."""
from __future__ import annotations

import math

import pytest

from jupyter_torchdist.core.errors import OptionsError
from jupyter_torchdist.core.search_options import EARLY_STOPS, REDUCTIONS
from jupyter_torchdist.kernel.sweeps.early_stop import ASHA, MedianRule, asha_rungs, make_rule, reduce_ranks

# Nine members arriving one by one; member i's loss at step s is CONSTANTS[i] / s.
CONSTANTS = [4, 7, 2, 9, 1, 6, 3, 8, 5]


def _run_one_by_one(mode: str) -> tuple[dict[int, int], dict[int, str]]:
    """Each member runs steps 1..9 (until stopped) before the next starts: grace 1, reduction 3 -> rungs 1, 3, 9."""
    rule = make_rule("asha", mode, grace=1, reduction=3)
    assert rule is not None
    sign = 1 if mode == "min" else -1
    stopped_at: dict[int, int] = {}
    reasons: dict[int, str] = {}
    for member, constant in enumerate(CONSTANTS):
        for step in range(1, 10):
            reason = rule.observe(member, step, sign * constant / step)
            if reason is not None:
                stopped_at[member], reasons[member] = step, reason
                break
    return stopped_at, reasons


def test_asha_stops_the_worse_ones_at_the_first_rung_and_lets_the_best_third_reach_the_next() -> None:
    stopped_at, _ = _run_one_by_one("min")
    # rung 1: 7 > 4 (asynchronous: judged against the one member before it), 9, 6, 8, 5 lose; 4, 2, 1, 3 go on;
    # rung 3: 3 is not within the best third of [4, 2, 1]; 4, 2, 1 reach step 9.
    assert stopped_at == {1: 1, 3: 1, 5: 1, 7: 1, 8: 1, 6: 3}
    assert CONSTANTS.index(min(CONSTANTS)) not in stopped_at


def test_asha_mode_max_mirrors_mode_min() -> None:
    assert _run_one_by_one("max")[0] == _run_one_by_one("min")[0]
    assert _run_one_by_one("max")[1][1] == (
        "ASHA at step 1: loss -7 is not in the best third of the 2 members that reached step 1 (cutoff -4)")


def test_asha_rungs_come_from_grace_reduction_factor_and_max_steps_as_rays() -> None:
    # Ray's AsyncHyperBandScheduler(grace_period=3, reduction_factor=4, max_t=100): rungs 3, 12, 48
    assert asha_rungs(3, 4, 100) == (3, 12, 48)
    assert asha_rungs(1, 4, 64) == (1, 4, 16), "a rung at max_steps would judge members that have finished"
    assert asha_rungs(1, 4, 65) == (1, 4, 16, 64)
    assert ASHA("min", grace=3).checkpoints() == (3, 12, 48, 192, 768), "the default reduction factor is 4"
    assert ASHA("min", grace=3, max_steps=40).checkpoints() == (3, 12)


def test_asha_keeps_the_best_quarter_by_default() -> None:
    rule = ASHA("min", grace=1)
    for member, loss in enumerate([0.1, 0.2, 0.3, 0.4]):   # each judged against those before it
        assert (rule.observe(member, 1, loss) is None) == (member == 0)
    assert rule.observe(8, 1, 0.15) is None   # cutoff: the quarter quantile of the four, 0.175
    assert "best quarter" in (rule.observe(9, 1, 0.19) or "")


def test_asha_judges_a_member_that_skipped_rungs_at_the_highest_it_passed_and_never_at_or_past_max_steps() -> None:
    rule = ASHA("min", grace=3, reduction=3, max_steps=20)   # rungs 3, 9 (27 is past max_steps)
    assert rule.observe(0, 3, 0.1) is None and rule.observe(0, 9, 0.1) is None
    reason = rule.observe(1, 10, 0.5)
    assert reason is not None and reason.startswith("ASHA at step 9 (reported at step 10): loss 0.5")
    assert rule.observe(2, 3, 0.01) is None and rule.observe(2, 19, 9.0) is not None   # judged at rung 9 from 19
    assert rule.observe(3, 20, 9.0) is None, "at max_steps a member has finished: never stopped"
    assert rule.observe(4, 3, 0.2) is not None   # member 3 was recorded nowhere: 0.2 is judged against 0.1, 0.01


def test_a_member_at_its_last_step_is_recorded_but_never_stopped() -> None:
    rule = ASHA("min", grace=2, reduction=2)
    assert rule.observe(0, 2, 0.1) is None
    assert rule.observe(1, 2, 0.9, final=True) is None   # its last step: no verdict ...
    assert rule.observe(2, 2, 0.6) is not None           # ... but its value counts: 0.6 is not in the best half
    median = MedianRule("min", grace=1, min_peers=1)
    assert median.observe(0, 1, 0.1) is None
    assert median.observe(1, 1, 0.9, final=True) is None and median.observe(2, 1, 0.9) is not None


def _peers(rule: MedianRule, count: int, losses: list[float]) -> None:
    for member in range(count):
        for step, loss in enumerate(losses, start=1):
            assert rule.observe(member, step, loss) is None


def test_median_rule_averages_from_the_grace_period_as_rays() -> None:
    rule = MedianRule("min", grace=3, min_peers=3)
    _peers(rule, 3, [100.0, 100.0, 1.0, 1.0])   # from step 3 on their running average is 1.0 (from step 1: 50.5)
    assert rule.running_average(0, 4) == 1.0 and rule.running_average(0, 2) is None
    reason = rule.observe(9, 4, 2.0)
    assert reason == ("median rule at step 4: best loss 2 is worse than the median 1 of 3 other members' running "
                      "averages from step 3 to step 4")


def test_median_rule_decides_nothing_with_fewer_than_min_peers_or_before_grace() -> None:
    rule = MedianRule("min", grace=2, min_peers=3)
    _peers(rule, 2, [4.0, 3.0, 2.0, 1.0])
    assert rule.observe(9, 2, 100.0) is None  # only 2 others reported by step 2
    _peers(rule, 3, [4.0, 3.0, 2.0, 1.0])
    assert rule.observe(10, 1, 100.0) is None  # before grace
    assert rule.observe(10, 2, 100.0) is not None and rule.observe(10, 3, 0.1) is None   # stopped once


def test_median_rule_in_mode_max_mirrors_and_stops_nan() -> None:
    rule = MedianRule("max", grace=1, min_peers=3)
    _peers(rule, 3, [0.5, 0.6])
    assert rule.observe(10, 1, 0.9) is None
    assert rule.observe(11, 1, 0.4) is not None
    assert "best loss nan" in (rule.observe(12, 1, math.nan) or "")


def test_non_finite_values_lose_to_any_finite_one() -> None:
    rule = ASHA("min", grace=1)
    assert rule.observe(0, 1, math.nan) is None  # no one to compare with
    assert rule.observe(1, 1, math.inf) is None  # all recorded are non-finite: no worse than them
    assert rule.observe(2, 1, 5.0) is None
    assert "loss nan" in (rule.observe(3, 1, math.nan) or "")


@pytest.mark.parametrize("call, says", [
    (lambda: make_rule("hyperband", "min", 1), "asha, median, none"),
    (lambda: make_rule("asha", "min", 0), "--grace must be"),
    (lambda: make_rule("asha", "min", 1, reduction=1), "--reduction-factor must be a whole number >= 2"),
    (lambda: make_rule("median", "min", 1, reduction=3), "--reduction-factor spaces ASHA's rungs"),
    (lambda: make_rule("asha", "min", 10, max_steps=10), "--max-steps 10 is not past --grace 10"),
    (lambda: make_rule("none", "min", 1, max_steps=10), "--max-steps bounds where an early-stopping rule judges"),
    (lambda: make_rule("median", "lowest", 1), "--mode must be min"),
    (lambda: make_rule("median", "min", 1, min_peers=0), "min_peers"),
    (lambda: reduce_ranks([1.0], "median"), "mean, min, max"),
])
def test_bad_arguments_are_refused_with_what_to_write(call, says) -> None:
    with pytest.raises(OptionsError, match=says):
        call()


def test_one_list_of_rules_and_of_reductions() -> None:
    assert EARLY_STOPS == ("asha", "median", "none") and REDUCTIONS == ("mean", "min", "max")
    assert make_rule("none", "max", 1) is None
    assert [reduce_ranks([1.0, 2.0, 6.0], how) for how in REDUCTIONS] == [3.0, 1.0, 6.0]
    assert reduce_ranks([], "mean") is None and math.isnan(reduce_ranks([1.0, math.nan], "min") or 0.0)
    assert reduce_ranks([1.0, math.inf], "max") == math.inf


def test_every_rule_carries_the_name_early_stop_takes() -> None:
    """A rule is one class (after Optuna's pruners): --early-stop's choices are the rules' names and "none"."""
    from jupyter_torchdist.core.search_options import EARLY_STOPS
    from jupyter_torchdist.kernel.sweeps.early_stop import RULES, make_rule

    assert tuple(RULES) + ("none",) == EARLY_STOPS
    for name, rule in RULES.items():
        made = make_rule(name, "min", 2, max_steps=10)
        assert type(made) is rule and made.name == name
