"""A sweep's search space: lists of values (a grid) and distributions to draw from, parsed and checked once.

``%%distribute --sweep "lr=loguniform(1e-4, 1e-1); layers=int(2, 8); opt=choice('adam', 'sgd'); batch=[32, 64]"``
and ``jupyter_torchdist.sweep(fn, {"lr": loguniform(1e-4, 1e-1), "batch": [32, 64]})`` both come here. A list is
written as in a grid (grid.py, whose checks and messages this shares); a distribution is a call whose arguments are
Python literals, read with ``ast`` and never run. A space with lists alone *is* a grid (the same value), so a grid
keeps its every-combination meaning; one with a distribution has no combination count and is drawn from instead.
"""
from __future__ import annotations

import ast
import math
import numbers
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from .errors import OptionsError
from .grid import _LITERAL_ERRORS, _check_size, _literal, _names, _parts, _unique, _values

__all__ = [
    "Distribution", "LogUniform", "Uniform", "IntRange", "Choice", "loguniform", "uniform", "intrange", "choice",
    "Space", "parse_space", "check_space", "is_grid", "grid_size", "sample", "describe_space",
]


@dataclass(frozen=True)
class Distribution:
    """Where one name's values are drawn from, beside a grid's lists: frozen, so a space can be compared, stored
    and shared between the kernel and a study file without a copy changing under it."""

    kind: ClassVar[str] = "distribution"     # the name the --sweep text calls it by
    example: ClassVar[str] = ""             # its arguments in an example that works

    def sample(self, rng: random.Random) -> Any:
        """One value; ``rng`` is the sweep's own, so a seed repeats the draws."""
        raise NotImplementedError

    def _fail(self, args: tuple[Any, ...], why: str) -> OptionsError:
        written = ", ".join(repr(a) for a in args)
        return OptionsError(f"{self.kind}({written}): {why}")


@dataclass(frozen=True)
class LogUniform(Distribution):
    """Uniform in log space between ``low`` and ``high``: each decade as likely as the next (learning rates)."""

    low: float
    high: float
    kind: ClassVar[str] = "loguniform"
    example: ClassVar[str] = "1e-4, 1e-1"

    def __post_init__(self) -> None:
        _float_bounds(self, above_zero=True)

    def sample(self, rng: random.Random) -> float:
        return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))

    def __str__(self) -> str:
        return f"loguniform({self.low!r}, {self.high!r})"


@dataclass(frozen=True)
class Uniform(Distribution):
    """Uniform between ``low`` and ``high`` (dropout, momentum: ranges with no favoured scale)."""

    low: float
    high: float
    kind: ClassVar[str] = "uniform"
    example: ClassVar[str] = "0.0, 0.5"

    def __post_init__(self) -> None:
        _float_bounds(self)

    def sample(self, rng: random.Random) -> float:
        return rng.uniform(self.low, self.high)

    def __str__(self) -> str:
        return f"uniform({self.low!r}, {self.high!r})"


@dataclass(frozen=True)
class IntRange(Distribution):
    """A whole number from ``low`` to ``high``, both included (as Optuna's ``suggest_int``): layers, widths."""

    low: int
    high: int
    kind: ClassVar[str] = "int"
    example: ClassVar[str] = "2, 8"

    def __post_init__(self) -> None:
        given = (self.low, self.high)
        low, high = (_number(self, given, v) for v in given)
        if low != int(low) or high != int(high):
            raise self._fail(given, f"int's bounds are whole numbers, e.g. int({self.example}); for a range of "
                                    "fractions use uniform(low, high)")
        if low > high:
            raise self._fail(given, f"low is above high: write int({self.high!r}, {self.low!r})")
        object.__setattr__(self, "low", int(low))
        object.__setattr__(self, "high", int(high))

    def sample(self, rng: random.Random) -> int:
        return rng.randint(self.low, self.high)

    def __str__(self) -> str:
        return f"int({self.low!r}, {self.high!r})"


@dataclass(frozen=True)
class Choice(Distribution):
    """One of ``options``, each as likely: names of optimizers, activations; values of any literal kind."""

    options: tuple[Any, ...]
    kind: ClassVar[str] = "choice"
    example: ClassVar[str] = "'adam', 'sgd'"

    def __post_init__(self) -> None:
        if not isinstance(self.options, (tuple, list)):
            raise OptionsError(f"a choice's options are a tuple, e.g. choice({self.example}); got {self.options!r}")
        if not self.options:
            raise OptionsError(f"choice() needs at least one option to choose from, e.g. choice({self.example})")
        object.__setattr__(self, "options", tuple(self.options))

    def sample(self, rng: random.Random) -> Any:
        return rng.choice(self.options)

    def __str__(self) -> str:
        if len(self.options) == 1 and isinstance(self.options[0], (list, tuple)):
            return f"choice({self.options!r})"   # choice([1, 2]) would mean choice(1, 2)
        return f"choice({', '.join(repr(o) for o in self.options)})"


def _number(dist: Distribution, given: tuple[Any, ...], value: Any) -> float:
    """A bound that is a finite real number (not a bool, which Python counts as one)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise dist._fail(given, f"{dist.kind}'s bounds are numbers, e.g. {dist.kind}({dist.example}); "
                                f"got {value!r}")
    try:
        finite = isinstance(value, numbers.Integral) or math.isfinite(value)
    except OverflowError:
        finite = False
    if not finite:
        raise dist._fail(given, f"{dist.kind}'s bounds must be finite numbers, e.g. {dist.kind}({dist.example})")
    return cast(float, value)   # an int stays an int (int(2, 8)); mypy counts int as float


def _float_bounds(dist: LogUniform | Uniform, above_zero: bool = False) -> None:
    """Both bounds finite numbers (above zero where ``above_zero``), ``low`` below ``high``; stored as floats."""
    given = (dist.low, dist.high)
    low, high = (_number(dist, given, v) for v in given)
    try:
        low, high = float(low), float(high)
    except OverflowError:
        raise dist._fail(given, f"{dist.kind}'s bounds must be finite numbers, e.g. "
                                f"{dist.kind}({dist.example})") from None
    if above_zero and min(low, high) <= 0:
        raise dist._fail(given, f"{dist.kind} draws in log space, so both bounds must be above zero, e.g. "
                                f"{dist.kind}({dist.example}); for a range from zero, use uniform(low, high)")
    if low == high:
        raise dist._fail(given, f"the bounds are equal; for a single value use a list, e.g. name=[{low!r}]")
    if low > high:
        raise dist._fail(given, f"low must be below high: write {dist.kind}({dist.high!r}, {dist.low!r})")
    object.__setattr__(dist, "low", low)
    object.__setattr__(dist, "high", high)


def loguniform(low: float, high: float) -> LogUniform:
    """Draws uniform in log space between ``low`` and ``high`` (both above zero)."""
    return LogUniform(low, high)


def uniform(low: float, high: float) -> Uniform:
    """Draws uniform between ``low`` and ``high``."""
    return Uniform(low, high)


def intrange(low: int, high: int) -> IntRange:
    """Draws a whole number from ``low`` to ``high``, both included."""
    return IntRange(low, high)


def choice(*options: Any) -> Choice:
    """Draws one of ``options``; a single list or tuple means its items (``choice(["adam", "sgd"])``)."""
    if len(options) == 1 and isinstance(options[0], (list, tuple)):
        options = tuple(options[0])
    return Choice(options)


Space = tuple[tuple[str, tuple[Any, ...] | Distribution], ...]   # (name, values or distribution), in the order given

_MAKERS: dict[str, tuple[Callable[..., Distribution], str]] = {   # the --sweep text's names: maker, example
    "loguniform": (loguniform, LogUniform.example), "uniform": (uniform, Uniform.example),
    "int": (intrange, IntRange.example), "intrange": (intrange, IntRange.example), "choice": (choice, Choice.example),
}
_KNOWN = ("loguniform(low, high), uniform(low, high), int(low, high) (also intrange(low, high)) and "
          "choice(a, b, ...)")
_CALLED = re.compile(r"\s*([A-Za-z_]\w*)\s*\(")


def parse_space(text: str) -> Space:
    """The ``--sweep`` text: ``"lr=loguniform(1e-4, 1e-1); batch=[32, 64]"`` ->
    ``(("lr", LogUniform(0.0001, 0.1)), ("batch", (32, 64)))``; a grid's text gives what ``parse_grid`` gives."""
    pairs = [(name, _entry(part, name, expr)) for part, name, expr in _parts(text)]
    return check_space(dict(_unique(pairs)))


def merge_spaces(spaces: Sequence[Space]) -> Space:
    """Several ``--sweep`` texts as one space, in the order given: a name given in two of them is refused, as it is
    within one."""
    if len(spaces) <= 1:
        return spaces[0] if spaces else ()
    return check_space(dict(_unique([pair for space in spaces for pair in space])))


def check_space(space: Mapping[str, Any]) -> Space:
    """A space given as a mapping (the Python API), checked: names are identifiers, each value a non-empty list of
    values or a ``Distribution``; a grid (lists alone) is held to grid.py's bound on its combinations."""
    needed = ("a sweep needs a space: a dict of names to lists of values or distributions, e.g. "
              "{'lr': loguniform(1e-4, 1e-1), 'batch': [32, 64]}")
    also = " or a distribution (loguniform, uniform, intrange, choice)"
    out = tuple((name, space[name] if isinstance(space[name], Distribution) else _values(name, space[name], also))
                for name in _names(space, needed))
    if is_grid(out):
        _check_size(out)
    return out


def is_grid(space: Space) -> bool:
    """Whether every name has a list of values (no distribution): then the sweep can run every combination."""
    return all(isinstance(entry, tuple) for _, entry in space)


def grid_size(space: Space) -> int:
    """A grid's number of combinations; a space with a distribution has none (refused)."""
    if not is_grid(space):
        raise OptionsError(f"{describe_space(space)} has distributions: it has no number of combinations")
    return math.prod([len(entry) for _, entry in space if isinstance(entry, tuple)])


def sample(space: Space, rng: random.Random) -> dict[str, Any]:
    """One member's parameters: a uniform pick from each list, a draw from each distribution, in the space's order."""
    return {name: entry.sample(rng) if isinstance(entry, Distribution) else rng.choice(entry)
            for name, entry in space}


def describe_space(space: Space) -> str:
    """``lr=loguniform(0.0001, 0.1); batch=[32, 64]``: the space as ``--sweep`` text (``parse_space`` reads it back
    where the values are literals), for messages and a study's record of what it searched."""
    return "; ".join(f"{name}={entry}" if isinstance(entry, Distribution) else f"{name}={list(entry)!r}"
                     for name, entry in space)


def _entry(part: str, name: str, expr: str) -> tuple[Any, ...] | list[Any] | Distribution:
    """One part's values: a distribution where ``expr`` calls one, else the grid's literal list."""
    try:
        node = ast.parse(expr, mode="eval").body
    except _LITERAL_ERRORS:
        called = _CALLED.match(expr)
        if called and called.group(1) in _MAKERS:
            fn = called.group(1)
            raise OptionsError(f"{part!r} does not parse: write {fn}'s arguments as Python literals, e.g. "
                               f"{name}={fn}({_MAKERS[fn][1]})") from None
        return _literal(name, expr)   # the grid's message
    if not isinstance(node, ast.Call):
        return _literal(name, expr)
    return _distribution(part, name, node)


def _distribution(part: str, name: str, call: ast.Call) -> Distribution:
    """The distribution ``call`` names, its arguments read as literals; each mistake named with its part."""
    fn = ast.unparse(call.func)
    if fn not in _MAKERS:
        raise OptionsError(f"{part!r}: {fn} is not a distribution; the known ones are {_KNOWN}; or give a list of "
                           f"values, e.g. {name}=[0.1, 0.01]")
    maker, args_example = _MAKERS[fn]
    example = f"{name}={fn}({args_example})"
    if call.keywords:
        raise OptionsError(f"{part!r}: {fn} takes its arguments in order, without names, e.g. {example}")
    try:
        args = [ast.literal_eval(arg) for arg in call.args]
    except _LITERAL_ERRORS:
        raise OptionsError(f"{part!r}: {fn}'s arguments must be Python literals (numbers, strings, tuples, "
                           f"lists), e.g. {example}") from None
    if fn != "choice" and len(args) != 2:
        raise OptionsError(f"{part!r}: {fn} takes two bounds (low, high), e.g. {example}")
    try:
        return maker(*args)
    except OptionsError as exc:
        raise OptionsError(f"{part!r}: {exc}") from None

