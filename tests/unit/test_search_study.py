"""Where a sweep's members come from (kernel/sweeps/search.py): one seeded order that more trials only extend (a
shuffled grid taken as a prefix, a stream of its own per draw), Optuna's ask-and-tell told each member's curve (a
stopped member's included) with a sampler that keeps members asked at once apart, and a study file two live kernels
share without failing each other's trials; the search options' checks (core/search_options.py)."""
from __future__ import annotations

import sqlite3

import pytest

from jupyter_torchdist.core.errors import OptionsError
from jupyter_torchdist.core.options import RunOptions, parse_options
from jupyter_torchdist.core.space import check_space, choice, loguniform
from jupyter_torchdist.kernel.sweeps.comparison import SweepFacts, scales
from jupyter_torchdist.kernel.sweeps.search import draws, make_search


def _all(search):
    out = []
    while (ask := search.ask()) is not None:
        out.append(ask.params)
    return out


def _resumed(space, kind, trials, seed, drawn, path=None):
    search = make_search(space, kind, trials, seed, "min", path)
    search.skip(drawn)
    return search


def test_a_random_search_resumed_with_more_trials_runs_each_combination_once():
    """The issue's case: a 10 x 10 grid, seed 198, 8 trials then 30 (random.sample repeated (9, 5) and never ran
    (9, 6): its draws depend on how many are asked)."""
    grid = check_space({"a": list(range(10)), "b": list(range(10))})
    first = _all(make_search(grid, "random", 8, 198, "min", None))
    more = _all(_resumed(grid, "random", 30, 198, drawn=8))
    every = first + more
    assert len(every) == 30 and len({(p["a"], p["b"]) for p in every}) == 30
    assert every == _all(make_search(grid, "random", 30, 198, "min", None)), "8 then 30 is 30 at once"


def test_draws_from_distributions_are_a_prefix_whatever_the_trials_and_a_grid_repeats_only_after_all():
    space = check_space({"lr": loguniform(1e-4, 1.0), "opt": choice("adam", "sgd"), "batch": [32, 64]})
    five = _all(make_search(space, "random", 5, 3, "min", None))
    assert five == _all(make_search(space, "random", 9, 3, "min", None))[:5] == _all(_resumed(space, "random", 9, 3,
                                                                                                0))[:5]
    assert _all(_resumed(space, "random", 5, 3, drawn=2)) == five[2:]
    assert _all(make_search(space, "random", 5, 4, "min", None)) != five
    small = check_space({"lr": [0.1, 0.01, 0.001], "batch": [32, 64]})
    order = draws(small, 0)
    twice = [tuple(next(order).values()) for _ in range(12)]
    assert len(set(twice[:6])) == 6 and set(twice[6:]) == set(twice[:6]), "every combination before any repeats"
    assert len(_all(make_search(small, "grid", None, None, "min", None))) == 6


def test_optuna_is_told_every_members_curve_and_its_end_a_stopped_one_scored_by_its_last_value():
    pytest.importorskip("optuna")
    space = check_space({"lr": loguniform(1e-4, 1.0), "shape": [(8, 8), (16,)]})
    search = make_search(space, "optuna", 3, 0, "min", None)
    assert not search.eager and search.planned == 3 and search.study.sampler._constant_liar
    asks = [search.ask() for _ in range(3)]
    assert search.ask() is None and all(a.params["shape"] in ((8, 8), (16,)) for a in asks)
    search.report(asks[0].token, [(1, 0.9), (3, 0.5)])
    search.report(asks[0].token, [(3, 0.4), (5, 0.3)])   # a step told again is told once
    search.report(asks[1].token, [(3, 0.8)])
    search.tell(asks[0].token, "done", 0.25)
    search.tell(asks[1].token, "stopped_early", None)
    search.tell(asks[2].token, "failed", None)
    trials = search.study.trials
    assert [t.state.name for t in trials] == ["COMPLETE", "PRUNED", "FAIL"]
    assert trials[0].intermediate_values == {1: 0.9, 3: 0.5, 5: 0.3} and trials[1].intermediate_values == {3: 0.8}
    assert trials[1].value == 0.8, "Optuna scores a pruned trial by its last reported value"
    again = search.again(asks[0].params)
    assert again.params == asks[0].params and search.study.trials[-1].params["lr"] == asks[0].params["lr"]


def test_a_study_file_two_live_kernels_share_keeps_each_ones_running_trials(tmp_path):
    pytest.importorskip("optuna")
    space, path = check_space({"lr": loguniform(1e-4, 1.0)}), str(tmp_path / "o.db")
    first = make_search(space, "optuna", 4, 0, "min", path)
    asks = [first.ask() for _ in range(3)]
    first.tell(asks[0].token, "done", 0.3)
    first.beat()   # the first kernel is alive: its two running trials beat
    second = _resumed(space, "optuna", 4, 0, drawn=3, path=path)
    assert [t.state.name for t in second.study.trials] == ["COMPLETE", "RUNNING", "RUNNING"]
    new = second.ask()
    assert new is not None and second.ask() is None
    assert new.params["lr"] not in {a.params["lr"] for a in asks}, "the seed drew the first members again"
    first.tell(asks[1].token, "done", 0.2)   # the first kernel goes on telling its own trials
    with sqlite3.connect(path) as db:   # the first kernel's process died a minute ago: its heartbeat is old
        db.execute("UPDATE trial_heartbeats SET heartbeat = datetime(heartbeat, '-1 hour')")
    third = _resumed(space, "optuna", 5, 0, drawn=4, path=path)
    states = [t.state.name for t in third.study.trials]
    assert states == ["COMPLETE", "COMPLETE", "FAIL", "RUNNING"], "only the trial whose heartbeat stopped is failed"
    rerun = third.again(asks[2].params, asks[2].token)
    assert rerun.params == asks[2].params and third.study.trials[-1].state.name == "RUNNING"


def test_the_views_axes_follow_the_space():
    space = check_space({"lr": loguniform(1e-4, 1.0), "lrs": [0.1, 0.001], "w": [4, 16], "opt": ["a", "b"]})
    assert scales(space) == {"lr": "log", "lrs": "log", "w": "linear", "opt": "category"}
    assert SweepFacts().metric == "loss"


@pytest.mark.parametrize("line, says", [
    ('--sweep "lr=loguniform(1e-4, 1e-1)"', "needs --trials N"),
    ('--sweep "lr=[1, 2]" --trials 2', "--trials N draws N members"),
    ('--sweep "lr=uniform(0, 1)" --search grid --trials 2', "--search grid runs every combination of lists"),
    ("--trials 3", "use them with --sweep"),
    ("--early-stop asha", "use them with --sweep"),
    ("--max-steps 30", "--max-steps shape a sweep's search: use them with --sweep"),
    ('--sweep "lr=[1, 2]" --grace 0', "--grace must be a whole number of steps >= 1"),
    ('--sweep "lr=[1, 2]" --early-stop hyperband', "invalid choice"),
    ('--sweep "lr=[1, 2]" --early-stop asha --reduction-factor 1', "--reduction-factor must be a whole number >= 2"),
    ('--sweep "lr=[1, 2]" --early-stop median --reduction-factor 3', "add --early-stop asha"),
    ('--sweep "lr=[1, 2]" --early-stop asha --grace 10 --max-steps 10', "--max-steps 10 is not past --grace 10"),
    ('--sweep "lr=[1, 2]" --max-steps 10', "use it with --early-stop asha or median"),
])
def test_search_options_that_do_not_fit_say_what_to_write(line, says):
    with pytest.raises(OptionsError, match=says):
        parse_options(f"-n 2 {line}")


def test_search_options_parse_into_the_run_options():
    o = parse_options('-n 2 --sweep "lr=loguniform(1e-4, 1e-1); b=[1, 2]" --trials 8 --seed 1 --metric acc '
                      '--mode max --early-stop asha --grace 5 --reduction-factor 3 --max-steps 90 '
                      '--metric-reduce mean --study s.db')
    assert (o.trials, o.seed, o.metric, o.mode, o.early_stop, o.grace, o.reduction_factor, o.max_steps,
            o.metric_reduce, o.study) == (8, 1, "acc", "max", "asha", 5, 3, 90, "mean", "s.db")
    plain = RunOptions(sweep=o.sweep, trials=2)
    assert plain.search is None and plain.reduction_factor is None and plain.max_steps is None


def test_an_optuna_search_without_optuna_installed_says_the_pip_line_before_anything_starts(monkeypatch):
    from jupyter_torchdist.core import search_options

    monkeypatch.setattr(search_options.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(OptionsError, match=r"pip install 'jupyter-torchdist\[sweeps\]'"):
        parse_options('-n 2 --sweep "lr=loguniform(1e-4, 1e-1)" --trials 4 --search optuna')
