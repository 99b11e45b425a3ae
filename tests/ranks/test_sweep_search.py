"""Sweeps that search, on real ranks (local processes: the search and the rule are the kernel's, the same on every
backend): members drawn from distributions, ASHA stopping the worse members (every rank of a pruned member gone,
its curve kept, its slots to the next), Optuna told each member's end, a rule that never gets its metric, and a
study file that a second sweep goes on from."""
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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _pids(folder: Path) -> list[int]:
    return [int(p.stem) for p in folder.glob("*.pid")]


def test_asha_prunes_the_worse_members_their_ranks_leave_and_the_best_runs_to_the_end(tmp_path):
    lrs = [1e-4, 0.1, 1e-3, 1.0, 10.0, 0.5]   # members 1..6; 0.1 is the best at every step
    s = jt.sweep(toy, {"lr": lrs}, str(tmp_path), n=2, local=True, concurrent=2, early_stop="asha", grace=2)
    assert s.wait(240)
    rows = {r["lr"]: r for r in s.rows()}
    assert rows[0.1]["state"] == "done" and rows[0.1]["steps"] == STEPS and s.best().params == {"lr": 0.1}
    pruned = [r for r in rows.values() if r["state"] == "pruned"]
    assert pruned, rows
    for r in pruned:
        assert 2 <= r["pruned_at"] < STEPS, r
        assert r["steps"] < STEPS and r["loss_last"] is not None and "ASHA at step" in r["error"]
    assert not [p for p in _pids(tmp_path) if _alive(p)], "a pruned member's rank outlived it"
    snap = s.snapshot()
    assert snap["counts"]["pruned"] == len(pruned) and snap["best_id"] == s.best().id
    assert [r["state"] for r in snap["runs"] if r["pruned_at"] is not None] == ["pruned"] * len(pruned)
    with pytest.raises(jt.MemberPruned, match="pruned: ASHA at step"):
        next(run for run in s.runs if run.state == "pruned").result()


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


def test_optuna_is_told_each_members_end_and_prunes_with_the_median_rule(tmp_path):
    pytest.importorskip("optuna")
    s = jt.sweep(toy, {"lr": jt.loguniform(1e-4, 10.0)}, str(tmp_path), n=2, local=True, trials=6, seed=0,
                 search="optuna", concurrent=2, early_stop="median", grace=3, steps=8, nap=0.05)
    assert s.wait(240)
    states = {t.number: t.state.name for t in s.study.trials}
    assert len(states) == 6 and set(states.values()) <= {"COMPLETE", "PRUNED"}
    ours = sorted(r.state for r in s.runs)
    assert sorted("done" if v == "COMPLETE" else "pruned" for v in states.values()) == ours
    assert s.study.best_trial.params["lr"] == s.best().params["lr"]


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
