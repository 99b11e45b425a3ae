"""A sweep's grid: the names a sweep sets and the values each takes, parsed and checked once.

``%%distribute --sweep "lr=[0.1, 0.01]; batch=[32, 64]"`` and ``jupyter_torchdist.sweep(fn, {"lr": [...]})`` both
come here. Values are Python literals (numbers, strings, tuples, lists, dicts, None, booleans); a notebook value can
be put in with IPython's own expansion (``--sweep "lr={lrs}"``). The runs go in the grid's order, the last name
changing fastest (as ``itertools.product`` and nested loops would).
"""
from __future__ import annotations

import ast
import itertools
import keyword
from collections.abc import Iterable, Mapping
from typing import Any, Final

from .errors import OptionsError

__all__ = ["Grid", "parse_grid", "check_grid", "combinations", "describe", "MAX_COMBINATIONS"]

Grid = tuple[tuple[str, tuple[Any, ...]], ...]   # (name, values) in the order given
MAX_COMBINATIONS: Final = 1000
_EXAMPLE = '--sweep "lr=[0.1, 0.01]; batch=[32, 64]"'


def parse_grid(text: str) -> Grid:
    """``"lr=[0.1, 0.01]; batch=[32, 64]"`` -> ``(("lr", (0.1, 0.01)), ("batch", (32, 64)))``."""
    parts = [p.strip() for p in text.split(";") if p.strip()]
    if not parts:
        raise OptionsError(f"--sweep needs at least one name and its values, e.g. {_EXAMPLE}")
    pairs = []
    for part in parts:
        name, eq, expr = part.partition("=")
        if not eq:
            raise OptionsError(f"{part!r} is not NAME=VALUES; write each as name=[v1, v2], separated by "
                               f"';', e.g. {_EXAMPLE}")
        try:
            value = ast.literal_eval(expr.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise OptionsError(f"the values of {name.strip()!r} ({expr.strip()!r}) are not a Python literal "
                               "list; use numbers, strings, tuples or lists (e.g. lr=[0.1, 0.01]), or put a notebook "
                               "value in with IPython's {braces}: lr={lrs}") from None
        pairs.append((name.strip(), list(value) if isinstance(value, (list, tuple)) else [value]))
    return check_grid(dict(_unique(pairs)))


def _unique(pairs: list[tuple[str, list[Any]]]) -> list[tuple[str, list[Any]]]:
    seen = [name for name, _ in pairs]
    twice = sorted({n for n in seen if seen.count(n) > 1})
    if twice:
        raise OptionsError(f"the sweep names {', '.join(twice)} more than once: give each name once, with all its "
                           "values in one list")
    return pairs


def check_grid(grid: Mapping[str, Iterable[Any]]) -> Grid:
    """A grid given as a mapping (the Python API), checked: names are identifiers, every name has values."""
    if not isinstance(grid, Mapping) or not grid:
        raise OptionsError(f"a sweep needs a grid: a dict of names to lists of values, e.g. "
                           f"{{'lr': [0.1, 0.01], 'batch': [32, 64]}}; got {grid!r}")
    out = []
    for name, values in grid.items():
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise OptionsError(f"a sweep's names must be Python names (the cell reads them as variables); "
                               f"got {name!r}")
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            raise OptionsError(f"the values of {name!r} must be a list (e.g. {name}=[0.1, 0.01]); got {values!r}")
        listed = tuple(values)
        if not listed:
            raise OptionsError(f"{name!r} has no values: give it at least one")
        out.append((name, listed))
    total = 1
    for _, values in out:
        total *= len(values)
    if total > MAX_COMBINATIONS:
        raise OptionsError(f"this sweep has {total:,} combinations, more than {MAX_COMBINATIONS:,}: sweep fewer "
                           "values at once (a notebook loop over smaller sweeps, or a random subset)")
    return tuple(out)


def combinations(grid: Grid) -> list[dict[str, Any]]:
    """Every combination, in the grid's order (the last name changing fastest)."""
    names = [name for name, _ in grid]
    return [dict(zip(names, values)) for values in itertools.product(*(values for _, values in grid))]


def describe(params: Mapping[str, Any]) -> str:
    """``lr=0.1, batch=32``: a combination as the views and tables name it."""
    return ", ".join(f"{k}={v!r}" for k, v in params.items())
