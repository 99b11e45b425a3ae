"""A sweep's search space (space.py): lists and distributions parsed, checked, drawn from and written back."""
from __future__ import annotations

import math
import random

import pytest

from jupyter_torchdist.core.errors import OptionsError
from jupyter_torchdist.core.grid import MAX_COMBINATIONS, parse_grid
from jupyter_torchdist.core.space import (
    Choice, IntRange, LogUniform, Uniform, check_space, choice, describe_space, grid_size, intrange, is_grid,
    loguniform, parse_space, sample, uniform,
)

EXAMPLE = ('lr=loguniform(1e-4, 1e-1); dropout=uniform(0.0, 0.5); layers=int(2, 8); opt=choice("adam", "sgd"); '
           'batch=[32, 64]')


def test_the_example_parses_into_distributions_and_a_list_in_the_order_given():
    assert parse_space(EXAMPLE) == (("lr", LogUniform(1e-4, 1e-1)), ("dropout", Uniform(0.0, 0.5)),
                                    ("layers", IntRange(2, 8)), ("opt", Choice(("adam", "sgd"))), ("batch", (32, 64)))
    assert parse_space("n=intrange(1, 3); x=uniform(-1, 1)") == (("n", IntRange(1, 3)), ("x", Uniform(-1.0, 1.0)))


def test_a_space_written_back_reads_the_same():
    space = parse_space(EXAMPLE)
    text = describe_space(space)
    assert text == ("lr=loguniform(0.0001, 0.1); dropout=uniform(0.0, 0.5); layers=int(2, 8); "
                    "opt=choice('adam', 'sgd'); batch=[32, 64]")
    assert parse_space(text) == space
    odd = check_space({"o": choice([[1, 2]]), "s": choice("a;b", 'c"d'), "w": [(8, 8), (16,)]})
    assert parse_space(describe_space(odd)) == odd


@pytest.mark.parametrize("text", [
    "lr=[0.1, 0.01, 0.001]; batch=[32, 64]",
    "opt='adam'; widths=[(8, 8), (16,)]",
    " lr = (1, 2) ;; flag=True ;",
])
def test_a_grids_text_gives_exactly_what_parse_grid_gives(text):
    space = parse_space(text)
    assert space == parse_grid(text) and is_grid(space)
    assert all(type(values) is tuple for _, values in space)


def test_the_distributions_text_forms_and_constructors():
    assert str(loguniform(1e-4, 0.1)) == "loguniform(0.0001, 0.1)"
    assert str(intrange(2, 8)) == "int(2, 8)" and str(choice("adam", "sgd")) == "choice('adam', 'sgd')"
    assert choice(["adam", "sgd"]) == choice("adam", "sgd") == choice(("adam", "sgd"))
    assert uniform(0, 1) == Uniform(0.0, 1.0) and isinstance(uniform(0, 1).low, float)
    assert intrange(1.0, 1e2) == IntRange(1, 100) and isinstance(intrange(1.0, 1e2).high, int)
    assert IntRange(3, 3).sample(random.Random(0)) == 3


def test_sampling_repeats_with_the_same_seed_and_differs_with_another():
    space = parse_space(EXAMPLE)
    draws = [sample(space, random.Random(7)) for _ in range(2)]
    assert draws[0] == draws[1] and list(draws[0]) == ["lr", "dropout", "layers", "opt", "batch"]
    rng_a, rng_b = random.Random(7), random.Random(8)
    assert [sample(space, rng_a) for _ in range(5)] != [sample(space, rng_b) for _ in range(5)]


def test_samples_stay_in_bounds_and_ints_reach_both_ends():
    rng, space = random.Random(1), parse_space(EXAMPLE)
    draws = [sample(space, rng) for _ in range(2000)]
    assert all(1e-4 <= d["lr"] <= 1e-1 and 0.0 <= d["dropout"] <= 0.5 for d in draws)
    assert {d["layers"] for d in draws} == set(range(2, 9))
    assert {d["opt"] for d in draws} == {"adam", "sgd"} and {d["batch"] for d in draws} == {32, 64}
    assert all(type(d["layers"]) is int for d in draws)


def test_loguniform_spreads_its_samples_evenly_in_log_space():
    rng, dist = random.Random(3), loguniform(1e-4, 1e-1)
    draws = [dist.sample(rng) for _ in range(2000)]
    below = sum(d < math.sqrt(1e-4 * 1e-1) for d in draws)
    assert 900 < below < 1100   # a uniform draw would put ~97% above the geometric mean
    assert 400 < sum(d < 1e-3 for d in draws) < 930   # the first decade holds about a third


@pytest.mark.parametrize("text, says", [
    ("lr=uniform(0.5, 0.1)", r"'lr=uniform\(0.5, 0.1\)': .*low must be below high: write uniform\(0.1, 0.5\)"),
    ("lr=uniform(0.1, 0.1)", "the bounds are equal; for a single value use a list"),
    ("n=int(8, 2)", r"low is above high: write int\(2, 8\)"),
    ("lr=loguniform(0, 1)", "must be above zero"),
    ("lr=loguniform(-1e-3, 1e-1)", "must be above zero"),
    ("lr=loguniform(1e-4)", r"^'lr=loguniform\(1e-4\)': loguniform takes two bounds \(low, high\), "
                            r"e.g. lr=loguniform\(1e-4, 1e-1\)$"),
    ("n=int(1, 2, 3)", r"int takes two bounds \(low, high\), e.g. n=int\(2, 8\)"),
    ("lr=log_uniform(1e-4, 1e-1)", r"'lr=log_uniform\(1e-4, 1e-1\)': log_uniform is not a distribution; the known "
                                   r"ones are loguniform\(low, high\), uniform\(low, high\), int\(low, high\)"),
    ("opt=choice()", r"'opt=choice\(\)': choice\(\) needs at least one option"),
    ("lr=loguniform(1e-4, ", r"'lr=loguniform\(1e-4,' does not parse: .*e.g. lr=loguniform\(1e-4, 1e-1\)"),
    ("lr=uniform(low=0, high=1)", "in order, without names"),
    ("lr=uniform(0, x)", "arguments must be Python literals"),
    ("lr=uniform('a', 1)", "bounds are numbers"),
    ("lr=uniform(True, 2)", "bounds are numbers, .*; got True"),
    ("lr=uniform(0, 1e999)", "must be finite"),
    ("n=int(2.5, 8)", "whole numbers"),
    ("lr=adam", "not a Python literal"),
    ("lr=[]", "'lr' has no values"),
    ("lr=uniform(0, 1); lr=[2]", "names lr more than once"),
    ("class=uniform(0, 1)", "must be Python names"),
])
def test_a_bad_space_says_what_to_write(text, says):
    with pytest.raises(OptionsError, match=says):
        parse_space(text)


def test_a_semicolon_inside_a_quoted_choice_or_brackets_does_not_split():
    assert parse_space('opt=choice("a;b", "c"); x=[\'p;q\', "r\\";s"]') == (
        ("opt", Choice(("a;b", "c"))), ("x", ("p;q", 'r";s')))


def test_a_space_given_as_a_dict_takes_distributions_and_lists():
    space = check_space({"lr": loguniform(1e-4, 1e-1), "batch": [32, 64], "n": range(3)})
    assert space == (("lr", LogUniform(1e-4, 1e-1)), ("batch", (32, 64)), ("n", (0, 1, 2)))
    assert not is_grid(space) and is_grid(check_space({"batch": [32, 64]}))
    assert grid_size(check_space({"a": [1, 2], "b": [1, 2, 3]})) == 6
    with pytest.raises(OptionsError, match="no number of combinations"):
        grid_size(space)
    big = {"a": range(40), "b": range(40)}
    assert check_space({**big, "lr": uniform(0, 1)})[2] == ("lr", Uniform(0.0, 1.0))  # drawn: no combinations
    for bad, says in [({}, "needs a space"), ({"lr": 0.1}, "must be a list or a distribution"),
                      ({"lr": "0.1"}, "must be a list"), ({"1x": [1]}, "must be Python names"),
                      (big, f"more than {MAX_COMBINATIONS:,}")]:
        with pytest.raises(OptionsError, match=says):
            check_space(bad)


def test_distributions_made_directly_are_checked_too():
    for make, says in [(lambda: LogUniform(0.0, 1.0), "above zero"), (lambda: Uniform(1.0, 0.0), "below high"),
                       (lambda: IntRange(2, 1), "above high"), (lambda: Choice(()), "at least one option"),
                       (lambda: Choice("ab"), "options are a tuple"), (lambda: IntRange(False, 1), "numbers"),
                       (lambda: Uniform(float("nan"), 1.0), "finite")]:
        with pytest.raises(OptionsError, match=says):
            make()
