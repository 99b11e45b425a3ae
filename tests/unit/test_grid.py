"""A sweep's grid (grid.py) and its options: parsed and checked once, with errors that say what to write."""
from __future__ import annotations

import pytest

from jupyter_torchdist.core.errors import OptionsError
from jupyter_torchdist.core.grid import MAX_COMBINATIONS, check_grid, combinations, describe, parse_grid
from jupyter_torchdist.core.options import CLI_PROG, parse_argv, parse_options


def test_a_grid_parses_into_every_combination_the_last_name_fastest():
    grid = parse_grid("lr=[0.1, 0.01, 0.001]; batch=[32, 64]")
    assert grid == (("lr", (0.1, 0.01, 0.001)), ("batch", (32, 64)))
    combos = combinations(grid)
    assert len(combos) == 6 and combos[0] == {"lr": 0.1, "batch": 32} and combos[1] == {"lr": 0.1, "batch": 64}
    assert describe(combos[-1]) == "lr=0.001, batch=64"
    assert parse_grid("opt='adam'; widths=[(8, 8), (16,)]") == (("opt", ("adam",)), ("widths", ((8, 8), (16,))))


@pytest.mark.parametrize("text, says", [
    ("", "at least one name"),
    ("lr", "is not NAME=VALUES"),
    ("lr=[]", "'lr' has no values"),
    ("lr=[1]; lr=[2]", "names lr more than once"),
    ("1x=[1]", "must be Python names"),
    ("class=[1]", "must be Python names"),
    ("lr=adam", "not a Python literal"),
    ("a=list(range(40)); b=list(range(40))", "not a Python literal"),
])
def test_a_bad_grid_says_what_to_write(text, says):
    with pytest.raises(OptionsError, match=says):
        parse_grid(text)


def test_a_grid_given_as_a_dict_is_checked_the_same_way():
    assert check_grid({"lr": range(3)}) == (("lr", (0, 1, 2)),)
    for bad, says in [({}, "needs a grid"), ({"lr": "0.1"}, "must be a list"), ({"lr": 0.1}, "must be a list"),
                      ({"a": range(40), "b": range(40)}, f"more than {MAX_COMBINATIONS:,}")]:
        with pytest.raises(OptionsError, match=says):
            check_grid(bad)


def test_the_magics_background_options_and_their_refusals():
    options = parse_options('-n 2 --sweep "lr=[0.1, 0.01]" --concurrent 2')
    assert options.sweep == (("lr", (0.1, 0.01)),) and options.concurrent == 2 and not options.background
    assert parse_options("--background").background
    for line, says in [("--concurrent 2", "use it with --sweep"), ("--background --pdb", "prompt"),
                       ('--sweep "lr=[1]" --keep', "drop one of the two"), ('--sweep "lr=[1]" -o x', "drop -o"),
                       ("--sweep lr=[1] --concurrent 0", ">= 1"), ('--sweep "lr=[]"', "has no values")]:
        with pytest.raises(OptionsError, match=says):
            parse_options(line)


def test_the_command_line_refuses_what_gives_a_notebook_a_handle():
    with pytest.raises(OptionsError, match="the command line waits for its run"):
        parse_argv(["--background", "train.py"], CLI_PROG)
    assert parse_options("--background train.py").script == ("train.py",)  # %distribute --background train.py


def test_sweep_given_twice_adds_its_names_and_a_name_given_twice_is_refused():
    """Seen in review: a second --sweep replaced the first, silently dropping its names."""
    options = parse_options('-n 2 --sweep "lr=[0.1, 0.01]" --sweep "batch=[32, 64]; wd=loguniform(1e-5, 1e-3)" '
                            '--trials 4')
    assert [name for name, _ in options.sweep] == ["lr", "batch", "wd"] and options.sweep[0] == ("lr", (0.1, 0.01))
    with pytest.raises(OptionsError, match="the sweep names lr more than once"):
        parse_options('--sweep "lr=[1]" --sweep "lr=[2]"')
