"""Sweeps that search, on real ranks (local processes: the search and the rule are the kernel's, the same on every
backend): members drawn from distributions, ASHA stopping the worse members (every rank of a member stopped early
gone, its curve kept, its slots to the next) at the rung step they report, never a member that finished its steps,
Optuna told each member's curve and end, a rule that never gets its metric, and a study file that a second sweep goes
on from, a member run again from its last commit."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import cloudpickle
import pytest

import jupyter_torchdist as jt
from jupyter_torchdist.core.errors import OptionsError

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the ranks cannot import the tests package

STEPS = 12


def toy(folder: str, lr: float, steps: int = STEPS, nap: float = 0.12, **_: object) -> float:
    """A loss that falls with the steps and is lowest near lr = 0.1; every rank notes its pid."""
    import math
    import os
    import time
    from pathlib import Path

    import torch.distributed as dist

    Path(folder, f"{os.getpid()}.pid").write_text(repr(lr))
    loss = 0.0
    for step in range(1, steps + 1):
        loss = (1.0 + abs(math.log10(lr) + 1.0)) / step
        dist.barrier()
        jt.report(step=step, loss=loss)
        time.sleep(nap)
    return loss


def paced(folder: str, lr: float, steps: int = 8, fast: int = 6, slow: float = 0.8, together: bool = False,
          **_: object) -> float:
    """The toy's loss, each rank on its own (``together``: in step, as DDP's ranks are): the first steps a few
    milliseconds each (several between two frames of the view), then ``slow`` seconds a step from step ``fast`` on."""
    import math
    import time

    import torch.distributed as dist

    loss = 0.0
    for step in range(1, steps + 1):
        if together:
            dist.barrier()
        loss = (1.0 + abs(math.log10(lr) + 1.0)) / step
        jt.report(step=step, total=steps, loss=loss)
        time.sleep(0.002 if step < fast else slow)
    return loss


def resumable(folder: str, lr: float, steps: int = 40, nap: float = 0.1, **_: object) -> dict[str, float]:
    """The toy, committing its step as it goes and resuming from its last commit: its value says where it began."""
    import time

    state = {"step": 0}
    start = jt.restore(state=state)
    for step in range(start + 1, steps + 1):
        state["step"] = step
        jt.report(step=step, loss=lr / step)
        jt.commit(step, state=state)
        time.sleep(nap)
    return {"loss": lr / steps, "start": start}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _pids(folder: Path) -> list[int]:
    return [int(p.stem) for p in folder.glob("*.pid")]


def test_asha_stops_the_worse_members_early_their_ranks_leave_and_the_best_runs_to_the_end(tmp_path):
    lrs = [1e-4, 0.1, 1e-3, 1.0, 10.0, 0.5]   # members 1..6; 0.1 is the best at every step
    s = jt.sweep(toy, {"lr": lrs}, str(tmp_path), n=2, local=True, concurrent=2, early_stop="asha", grace=2)
    assert s.wait(240)
    rows = {r["lr"]: r for r in s.rows()}
    assert rows[0.1]["state"] == "done" and rows[0.1]["steps"] == STEPS and s.best().params == {"lr": 0.1}
    early = [r for r in rows.values() if r["state"] == "stopped_early"]
    assert early, rows
    for r in early:
        assert r["stopped_early_at"] in (2, 8), r   # the rungs: --grace 2 x 4**k below the 12 steps
        assert r["steps"] < STEPS and r["loss_last"] is not None and "ASHA at step" in r["error"]
    assert not [p for p in _pids(tmp_path) if _alive(p)], "a stopped member's rank outlived it"
    snap = s.snapshot()
    assert snap["counts"]["stopped_early"] == len(early) and snap["best_id"] == s.best().number
    assert [r["state"] for r in snap["runs"] if r["stopped_early_at"] is not None] == ["stopped_early"] * len(early)
    with pytest.raises(jt.MemberStoppedEarly, match="stopped early: ASHA at step"):
        next(run for run in s.runs if run.state == "stopped_early").result()


def test_a_member_is_judged_at_the_rung_step_it_reports_and_stops_within_the_steps_in_flight(tmp_path):
    """Steps 1 to 5 take milliseconds (the view's frames come every 100 ms), then a step takes 0.8 s: the rule
    decides at step 4 itself, and the member's ranks are gone before its next slow step."""
    s = jt.sweep(paced, {"lr": [0.1, 10.0, 1e-4, 30.0]}, str(tmp_path), n=2, local=True, concurrent=1,
                 early_stop="asha", grace=4, reduction_factor=2, max_steps=8)   # one rung: 4
    assert s.wait(240)
    rows = {r["lr"]: r for r in s.rows()}
    assert rows[0.1]["state"] == "done" and rows[0.1]["steps"] == 8 and rows[0.1]["stopped_early_at"] is None
    for lr in (10.0, 1e-4, 30.0):   # each not in the best half of those at step 4 before it
        r = rows[lr]
        assert r["state"] == "stopped_early" and r["stopped_early_at"] == 4, r
        assert r["error"] == f"stopped early: {s.member[r['run']].why}" and "ASHA at step 4: loss" in r["error"], r
        assert 4 <= r["steps"] <= 7, r   # 5 and 6 were in flight with 4; the stop lands within step 6's 0.8 s


def test_a_member_that_finished_all_its_steps_is_never_called_stopped_early(tmp_path):
    """Judged at step 4 of 6 fast steps taken together, a member may well finish before its stop reaches its ranks:
    then it is done, with its value, and nothing in its row speaks of a stop (a rule's stop that comes after every
    rank has returned, or reported its last step, changes nothing); otherwise it is stopped early, without a value,
    because the stop reached a rank still at work (rank 0's last step may have been on its way: the kernel hears
    each rank a few milliseconds late)."""
    s = jt.sweep(paced, {"lr": [0.1, 10.0, 5.0]}, str(tmp_path), n=2, local=True, concurrent=1, steps=6, fast=99,
                 together=True, early_stop="asha", grace=4, reduction_factor=2)
    assert s.wait(240)
    for run, r in zip(s.runs, s.rows()):
        if r["state"] == "done":
            assert r["steps"] == 6 and r["stopped_early_at"] is None and r["error"] is None, r
            assert run.result() == r["value"] and s.member[run.number].why is None
        else:
            assert r["state"] == "stopped_early" and r["stopped_early_at"] == 4 and run.value is None, r
            assert run.details is not None and any(rank.state != "done" for rank in run.details.state.ranks), r
    assert s.rows()[0]["state"] == "done"


def test_a_random_search_draws_its_trials_from_the_space_repeatably(tmp_path):
    space = {"lr": jt.loguniform(1e-3, 1.0), "width": jt.choice(8, 16)}
    s = jt.sweep(toy, space, str(tmp_path), n=2, local=True, trials=3, seed=7, concurrent=2, steps=2, nap=0.0)
    assert s.wait(120)
    again = jt.sweep(toy, space, str(tmp_path), n=2, local=True, trials=3, seed=7, concurrent=2, steps=2, nap=0.0)
    assert again.wait(120)
    params = [r.params for r in s.runs]
    assert params == [r.params for r in again.runs] and len(params) == 3
    assert all(1e-3 <= p["lr"] <= 1.0 and p["width"] in (8, 16) for p in params)
    assert [r["state"] for r in s.rows()] == ["done"] * 3 and s.search.kind == "random"
    assert s.state == "done" and s.result() == s.rows() and s.stop() is False  # a Handle, as each run is


def test_optuna_is_told_each_members_curve_and_end_and_stops_with_the_median_rule(tmp_path):
    pytest.importorskip("optuna")
    s = jt.sweep(toy, {"lr": jt.loguniform(1e-4, 10.0)}, str(tmp_path), n=2, local=True, trials=6, seed=0,
                 search="optuna", concurrent=2, early_stop="median", grace=3, steps=8, nap=0.05)
    assert s.wait(240)
    trials = {t.number: t for t in s.study.trials}
    assert len(trials) == 6 and {t.state.name for t in trials.values()} <= {"COMPLETE", "PRUNED"}
    ours = sorted(r.state for r in s.runs)
    assert sorted("done" if t.state.name == "COMPLETE" else "stopped_early" for t in trials.values()) == ours
    assert s.study.best_trial.params["lr"] == s.best().params["lr"]
    for run in s.runs:   # every trial carries its curve, a stopped one's to the step it was stopped at
        member, trial = s.member[run.number], trials[s.member[run.number].token]
        curve = trial.intermediate_values
        assert curve and max(curve) == member.steps, (curve, member)
        assert all(curve[step] == value for step, value in member.curve if step in curve)
        if run.state == "stopped_early":
            assert trial.value == curve[max(curve)] and member.stopped_early_at <= max(curve)


def test_early_stopping_without_its_metric_fails_the_member_saying_what_to_report(tmp_path):
    def silent(folder: str, k: int) -> int:
        import time

        for step in range(1, 6):
            jt.report(step=step, accuracy=0.5)
            time.sleep(0.1)
        return 1

    s = jt.sweep(silent, {"k": [1]}, str(tmp_path), n=2, local=True, early_stop="asha", grace=2)
    assert s.wait(120)
    (row,) = s.rows()
    assert row["state"] == "failed" and "without reporting it" in row["error"] and "--metric" in row["error"]


def test_a_study_file_goes_on_where_the_search_stopped(tmp_path):
    study = str(tmp_path / "lr.db")
    space = {"lr": jt.loguniform(1e-3, 1.0)}
    first = jt.sweep(toy, space, str(tmp_path), n=2, local=True, trials=4, seed=3, concurrent=1, steps=3, nap=0.0,
                     study=study)
    while sum(r.state == "done" for r in first.runs) < 2:
        assert not first.done()
        time.sleep(0.05)
    assert first.state == "running" and first.stop() is True
    assert first.wait(60) and first.state == "stopped" and first.error is None
    done_before = {r.params["lr"] for r in first.runs if r.state == "done"}
    second = jt.sweep(toy, space, str(tmp_path), n=2, local=True, trials=4, seed=3, concurrent=1, steps=3,
                      nap=0.0, study=study)
    assert second.wait(120)
    rows = second.rows()
    assert len(rows) == 4 and [r["state"] for r in rows] == ["done"] * 4
    assert {r["lr"] for r in rows[:len(second.past)]} == done_before and len(second.past) >= 2
    assert not done_before & {r.params["lr"] for r in second.runs}, "a finished member ran again"
    with pytest.raises(jt.LaunchError, match="made by another sweep"):
        jt.sweep(toy, {"lr": jt.uniform(0.1, 0.2)}, str(tmp_path), n=2, local=True, trials=2, study=study)
    with pytest.raises(jt.LaunchError, match="early_stop: 'none' there, 'median' here"):
        jt.sweep(toy, space, str(tmp_path), n=2, local=True, trials=4, seed=3, study=study, early_stop="median")


def test_a_member_run_again_on_resume_starts_from_its_last_commit(tmp_path):
    study = str(tmp_path / "c.db")
    first = jt.sweep(resumable, {"lr": [0.1]}, str(tmp_path), n=2, local=True, study=study)
    while (first.rows()[0]["steps"] or 0) < 5:
        assert not first.done(), first.rows()
        time.sleep(0.05)
    assert first.stop() and first.wait(60) and first.rows()[0]["state"] == "stopped"
    commits = sorted(int(p.stem.split("-")[-1]) for p in (tmp_path / "c-commits" / "member-1").glob("commit-*"))
    assert commits and commits[-1] >= 4, commits
    second = jt.sweep(resumable, {"lr": [0.1]}, str(tmp_path), n=2, local=True, study=study, nap=0.0)
    assert second.wait(120)
    (row,) = second.rows()
    assert row["state"] == "done" and row["value.start"] == commits[-1] and row["steps"] == 40, row


@pytest.mark.parametrize("kwargs, says", [
    ({"trials": None}, "needs --trials N"),
    ({"search": "grid", "trials": 2}, "--search grid runs every combination of lists"),
    ({"trials": 2, "early_stop": "hyperband"}, "--early-stop must be one of"),
    ({"trials": 2, "metric_reduce": "sum"}, "--metric-reduce must be one of"),
])
def test_bad_search_options_start_nothing(kwargs, says):
    before = len(jt.runs())
    with pytest.raises(OptionsError, match=says):
        jt.sweep(toy, {"lr": jt.loguniform(1e-3, 1.0)}, "/nonexistent", n=2, local=True, **kwargs)
    assert len(jt.runs()) == before
