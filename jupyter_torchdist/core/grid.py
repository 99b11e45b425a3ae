"""A sweep's grid: the names a sweep sets and the values each takes, parsed and checked once.

``%%distribute --sweep "lr=[0.1, 0.01]; batch=[32, 64]"`` and ``jupyter_torchdist.sweep(fn, {"lr": [...]})`` both
come here. Values are Python literals (numbers, strings, tuples, lists, dicts, None, booleans); a notebook value can
be put in with IPython's own expansion (``--sweep "lr={lrs}"``). The runs go in the grid's order, the last name
changing fastest (as ``itertools.product`` and nested loops would).

A grid is the plainest search space: ``space.py`` adds distributions beside the lists and builds on the pieces here
(the splitting of the text, the name and value checks, the combination bound), so that both say the same things.
"""
from __future__ import annotations

import ast
import itertools
import keyword
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeVar

from .errors import OptionsError

__all__ = ["Grid", "parse_grid", "check_grid", "combinations", "describe", "MAX_COMBINATIONS"]

Grid = tuple[tuple[str, tuple[Any, ...]], ...]   # (name, values) in the order given
MAX_COMBINATIONS: Final = 1000
_EXAMPLE = '--sweep "lr=[0.1, 0.01]; batch=[32, 64]"'
_LITERAL_ERRORS = (ValueError, SyntaxError, TypeError, MemoryError, RecursionError)
_CLOSE = {")": "(", "]": "[", "}": "{"}
_T = TypeVar("_T")


def parse_grid(text: str) -> Grid:
    """``"lr=[0.1, 0.01]; batch=[32, 64]"`` -> ``(("lr", (0.1, 0.01)), ("batch", (32, 64)))``."""
    pairs = [(name, _literal(name, expr)) for _, name, expr in _parts(text)]
    return check_grid(dict(_unique(pairs)))


def check_grid(grid: Mapping[str, Iterable[Any]]) -> Grid:
    """A grid given as a mapping (the Python API), checked: names are identifiers, every name has values."""
    names = _names(grid, "a sweep needs a grid: a dict of names to lists of values, e.g. "
                         "{'lr': [0.1, 0.01], 'batch': [32, 64]}")
    out = tuple((name, _values(name, grid[name])) for name in names)
    _check_size(out)
    return out


def combinations(grid: Grid) -> list[dict[str, Any]]:
    """Every combination, in the grid's order (the last name changing fastest)."""
    names = [name for name, _ in grid]
    return [dict(zip(names, values)) for values in itertools.product(*(values for _, values in grid))]


def describe(params: Mapping[str, Any]) -> str:
    """``lr=0.1, batch=32``: a combination as the views and tables name it (a float drawn from a distribution to
    four significant figures: ``lr=0.03414``; ``results()`` keeps the exact value)."""
    return ", ".join(f"{k}={_shown(v)}" for k, v in params.items())


def _shown(value: Any) -> str:
    text = repr(value)
    return format(value, ".4g") if type(value) is float and len(text) > 8 else text


# The pieces space.py shares: one wording for the same mistake, whichever way the sweep was written.

def _split(text: str) -> list[str]:
    """The text cut at each ``;`` outside brackets and quotes (``choice("a;b", "c")`` stays whole), stripped."""
    parts, start, opened, quote, escaped = [], 0, [], "", False
    for i, ch in enumerate(text):
        if quote:
            escaped, quote = (not escaped and ch == "\\"), ("" if ch == quote and not escaped else quote)
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            opened.append(ch)
        elif ch in _CLOSE and opened and opened[-1] == _CLOSE[ch]:
            opened.pop()
        elif ch == ";" and not opened:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _parts(text: str) -> list[tuple[str, str, str]]:
    """``(part, name, expr)`` for each ``name=expr`` of the ``--sweep`` text; refused when one is not that form."""
    parts = _split(text)
    if not parts:
        raise OptionsError(f"--sweep needs at least one name and its values, e.g. {_EXAMPLE}")
    out = []
    for part in parts:
        name, eq, expr = part.partition("=")
        if not eq:
            raise OptionsError(f"{part!r} is not NAME=VALUES; write each as name=[v1, v2], separated by "
                               f"';', e.g. {_EXAMPLE}")
        out.append((part, name.strip(), expr.strip()))
    return out


def _literal(name: str, expr: str) -> list[Any]:
    """A grid part's values: a list or tuple gives its items, a single literal gives itself."""
    try:
        value = ast.literal_eval(expr)
    except _LITERAL_ERRORS:
        raise OptionsError(f"the values of {name!r} ({expr!r}) are not a Python literal "
                           "list; use numbers, strings, tuples or lists (e.g. lr=[0.1, 0.01]), or put a notebook "
                           "value in with IPython's {braces}: lr={lrs}") from None
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _unique(pairs: Sequence[tuple[str, _T]]) -> Sequence[tuple[str, _T]]:
    seen = [name for name, _ in pairs]
    twice = sorted({n for n in seen if seen.count(n) > 1})
    if twice:
        raise OptionsError(f"the sweep names {', '.join(twice)} more than once: give each name once, with all its "
                           "values in one list")
    return pairs


def _names(mapping: Mapping[str, Any], needed: str) -> Iterator[str]:
    """The mapping's names, each checked as it comes: a Python name the cell can read (``needed`` says what an
    empty or non-mapping one lacks). The caller checks each name's values before the next name is checked."""
    if not isinstance(mapping, Mapping) or not mapping:
        raise OptionsError(f"{needed}; got {mapping!r}")
    for name in mapping:
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise OptionsError(f"a sweep's names must be Python names (the cell reads them as variables); "
                               f"got {name!r}")
        yield name


def _values(name: str, values: Any, also: str = "") -> tuple[Any, ...]:
    """One name's list of values as a tuple; ``also`` names what else the caller accepts in a list's place."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise OptionsError(f"the values of {name!r} must be a list{also} (e.g. {name}=[0.1, 0.01]); got {values!r}")
    listed = tuple(values)
    if not listed:
        raise OptionsError(f"{name!r} has no values: give it at least one")
    return listed


def _check_size(grid: Sequence[tuple[str, tuple[Any, ...]]]) -> None:
    total = math.prod(len(values) for _, values in grid)
    if total > MAX_COMBINATIONS:
        raise OptionsError(f"this sweep has {total:,} combinations, more than {MAX_COMBINATIONS:,}: sweep fewer "
                           "values at once (a notebook loop over smaller sweeps, or a random subset)")
