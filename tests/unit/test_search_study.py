"""Where a sweep's members come from (kernel/sweeps/search.py) and how a study is kept (kernel/sweeps/study.py):
draws that a seed repeats, a grid sampled without repeats, Optuna's ask-and-tell with lists of any values, a study
file that keeps tuples as tuples and refuses another sweep's file; the search options'
checks (core/search_options.py)."""
from __future__ import annotations

import pytest

from jupyter_torchdist.core.errors import LaunchError, OptionsError
from jupyter_torchdist.core.options import RunOptions, parse_options
from jupyter_torchdist.core.space import check_space, choice, loguniform
from jupyter_torchdist.kernel.sweeps.search import make_search
from jupyter_torchdist.kernel.sweeps.study import Member, open_study
from jupyter_torchdist.kernel.sweeps.comparison import SweepFacts, scales


def _all(search):
    out = []
    while (ask := search.ask()) is not None:
        out.append(ask.params)
    return out


def test_a_random_search_repeats_with_its_seed_and_a_resumed_one_skips_what_was_drawn():
    space = check_space({"lr": loguniform(1e-4, 1.0), "opt": choice("adam", "sgd"), "batch": [32, 64]})
    first, again = make_search(space, "random", 5, 3, "min", None), make_search(space, "random", 5, 3, "min", None)
    drawn = _all(first)
    assert drawn == _all(again) and len(drawn) == 5 and first.eager and first.planned == 5
    resumed = make_search(space, "random", 5, 3, "min", None)
    resumed.skip(2)
    assert _all(resumed) == drawn[2:]
    assert _all(make_search(space, "random", 5, 4, "min", None)) != drawn


def test_a_random_search_over_a_grid_draws_distinct_combinations_while_there_are_enough():
    space = check_space({"lr": [0.1, 0.01, 0.001], "batch": [32, 64]})
    drawn = _all(make_search(space, "random", 6, 0, "min", None))
    assert sorted(map(str, drawn)) == sorted({str(p) for p in drawn}) and len(drawn) == 6
    assert len(_all(make_search(space, "grid", None, None, "min", None))) == 6


def test_optunas_search_asks_for_lists_of_any_values_and_learns_from_what_it_is_told():
    pytest.importorskip("optuna")
    space = check_space({"lr": loguniform(1e-4, 1.0), "shape": [(8, 8), (16,)]})
    search = make_search(space, "optuna", 3, 0, "min", None)
    assert not search.eager and search.planned == 3
    asks = [search.ask() for _ in range(3)]
    assert search.ask() is None and all(a.params["shape"] in ((8, 8), (16,)) for a in asks)
    search.tell(asks[0].token, "done", 0.5)
    search.tell(asks[1].token, "pruned", None)
    search.tell(asks[2].token, "failed", None)
    assert [t.state.name for t in search.study.trials] == ["COMPLETE", "PRUNED", "FAIL"]
    again = search.again(asks[0].params)
    assert again.params == asks[0].params and search.study.trials[-1].params["lr"] == asks[0].params["lr"]


def test_a_study_keeps_its_members_as_they_were_and_refuses_another_sweeps_file(tmp_path):
    path = str(tmp_path / "s.db")
    store = open_study(path, {"space": "lr=[1, 2]", "search": "grid"})
    member = Member(1, {"shape": (8, 8), "lr": 0.1}, state="pruned", steps=9, best=0.2, last=0.3, pruned_at=9,
                    why="ASHA at step 9", curve=[[1.0, 0.5], [9.0, 0.3]])
    store.save(member)
    store.save(Member(2, {"shape": (16,), "lr": 0.2}))
    store.close()
    store = open_study(path, {"space": "lr=[1, 2]", "search": "grid"})
    kept = store.members()
    assert kept[0] == member and kept[0].params["shape"] == (8, 8) and kept[1].state == "queued"
    store.close()
    with pytest.raises(LaunchError, match=r"made by another sweep \(search: 'grid' there, 'random' here\)"):
        open_study(path, {"space": "lr=[1, 2]", "search": "random"})
    with pytest.raises(LaunchError, match="does not exist"):
        open_study(str(tmp_path / "no" / "s.db"), {})


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
    ('--sweep "lr=[1, 2]" --grace 0', "--grace must be a whole number of steps >= 1"),
    ('--sweep "lr=[1, 2]" --early-stop hyperband', "invalid choice"),
])
def test_search_options_that_do_not_fit_say_what_to_write(line, says):
    with pytest.raises(OptionsError, match=says):
        parse_options(f"-n 2 {line}")


def test_search_options_parse_into_the_run_options():
    o = parse_options('-n 2 --sweep "lr=loguniform(1e-4, 1e-1); b=[1, 2]" --trials 8 --seed 1 --metric acc '
                      '--mode max --early-stop median --grace 5 --metric-reduce mean --study s.db')
    assert (o.trials, o.seed, o.metric, o.mode, o.early_stop, o.grace, o.metric_reduce, o.study) == \
        (8, 1, "acc", "max", "median", 5, "mean", "s.db")
    assert RunOptions(sweep=o.sweep, trials=2).search is None


def test_optunas_study_in_a_file_goes_on_with_new_draws_and_forgets_trials_a_dead_kernel_left_running(tmp_path):
    pytest.importorskip("optuna")
    space, path = check_space({"lr": loguniform(1e-4, 1.0)}), str(tmp_path / "o.db")
    first = make_search(space, "optuna", 4, 0, "min", path)
    asks = [first.ask() for _ in range(3)]
    first.tell(asks[0].token, "done", 0.3)
    first.tell(asks[1].token, "done", 0.2)   # the third is still running when its kernel dies
    resumed = make_search(space, "optuna", 4, 0, "min", path)
    resumed.skip(3)
    assert [t.state.name for t in resumed.study.trials] == ["COMPLETE", "COMPLETE", "FAIL"]
    again, new = resumed.again(asks[2].params), resumed.ask()
    assert again.params == asks[2].params and resumed.ask() is None
    assert new.params["lr"] not in {a.params["lr"] for a in asks}, "the seed drew the first members again"


def test_an_optuna_search_without_optuna_installed_says_the_pip_line_before_anything_starts(monkeypatch):
    from jupyter_torchdist.core import search_options

    monkeypatch.setattr(search_options.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(OptionsError, match=r"pip install 'jupyter-torchdist\[sweeps\]'"):
        parse_options('-n 2 --sweep "lr=loguniform(1e-4, 1e-1)" --trials 4 --search optuna')
