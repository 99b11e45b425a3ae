"""The sweep's judge (kernel/sweeps/judge.py): each report of a member's ranks judged as it arrives, so a rule
decides at the rung step itself; a member at its last step never stopped; every rank's value at one step reduced
once all have come; the curve handed to the search with its rungs."""
from __future__ import annotations

from jupyter_torchdist.kernel.sweeps.judge import STOPPED_EARLY, Judge
from jupyter_torchdist.kernel.sweeps.study import Member


def _report(judge: Judge, member: Member, step: int, loss: float | None, rank: int = 0, total: int | None = None):
    metrics = {} if loss is None else {"loss": loss}
    return judge.report(member, rank, {"t": "progress", "step": step, "total": total, "metrics": metrics, "at": 0.0})


def test_the_rule_decides_at_the_reported_rung_step_itself() -> None:
    judge = Judge("loss", "min", "asha", 3, None, reduction_factor=4, max_steps=100)   # rungs 3, 12, 48
    good, bad = Member(1, {}), Member(2, {})
    for step in range(1, 13):
        assert _report(judge, good, step, 1.0 / step) is None
    assert [_report(judge, bad, step, 5.0) for step in (1, 2)] == [None, None]
    verdict = _report(judge, bad, 3, 5.0)
    assert verdict is not None and verdict[0] == STOPPED_EARLY == "stopped_early"
    assert verdict[1].startswith("ASHA at step 3: loss 5 is not in the best quarter") and bad.stopped_early_at == 3
    assert _report(judge, bad, 4, 0.0) is None, "a member is judged once"
    assert (bad.steps, bad.best, bad.last, good.steps) == (4, 0.0, 0.0, 12)


def test_a_member_at_its_last_step_is_never_stopped_and_a_late_verdict_is_withdrawn() -> None:
    judge = Judge("loss", "min", "asha", 2, None, reduction_factor=2)   # rungs 2, 4, 8, ... (no --max-steps)
    first, last_step = Member(1, {}), Member(2, {})
    assert _report(judge, first, 2, 0.1, total=10) is None
    assert _report(judge, last_step, 2, 0.9, total=2) is None, "its report says step 2 of 2: it has finished"
    late = Member(3, {})
    assert _report(judge, late, 2, 0.95) is not None
    judge.withdraw(late)   # it finished before the stop reached its ranks: its row says nothing of a stop
    assert late.stopped_early_at is None and late.why is None


def test_with_metric_reduce_every_ranks_value_at_a_step_is_reduced_once_all_have_come() -> None:
    judge = Judge("loss", "min", "none", 1, "max", world_size=2)
    member = Member(1, {})
    assert _report(judge, member, 1, 0.5, rank=1) is None and member.last is None   # rank 0's not yet here
    _report(judge, member, 1, 0.2, rank=0)
    assert member.last == 0.5 and member.steps == 1
    _report(judge, member, 2, 0.1, rank=0)
    _report(judge, member, 3, 0.3, rank=0)
    _report(judge, member, 3, 0.4, rank=1)   # step 2 of rank 1 never came (thinned): step 3 is judged alone
    assert member.last == 0.4 and member.curve == [[1.0, 0.5], [3.0, 0.4]]


def test_a_rule_without_its_metric_fails_the_member_past_its_first_rung() -> None:
    judge = Judge("loss", "min", "median", 2, None)
    member = Member(1, {})
    assert _report(judge, member, 2, None) is None, "at the rung the metric may still come in a report of its own"
    verdict = _report(judge, member, 3, None)
    assert verdict is not None and verdict[0] == "failed" and "without reporting it" in verdict[1]
    assert "--metric NAME" in verdict[1]


def test_the_search_is_told_the_curve_thinned_with_its_rungs_kept() -> None:
    judge = Judge("loss", "min", "asha", 3, None, reduction_factor=4)
    member = Member(1, {})
    for step in range(1, 101):
        _report(judge, member, step, 1.0 / step)
    points = judge.take_points(1)
    steps = [s for s, _ in points]
    assert {3, 12, 48, 100} <= set(steps) and len(points) <= 10 and steps == sorted(steps)
    assert judge.take_points(1) == [], "each point is told once"
    _report(judge, member, 101, 0.001)
    assert judge.take_points(1) == [(101, 0.001)]
