"""Where a sweep's members come from: a grid's combinations, draws from a space, or Optuna's sampler.

A grid and a random search know every member ahead (``eager``): the sweep queues them all at once, as a grid always
did. Optuna's sampler learns from the members that ended, so each member is asked for when a slot frees
(ask-and-tell): ``ask()`` gives the next parameters and a token, ``tell(token, state, value)`` the member's end.
A resumed study skips what an earlier kernel already drew (``skip``).
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any, Final, Protocol

from ...core.errors import OptionsError
from ...core.grid import Grid, combinations
from ...core.search_options import OPTUNA_MISSING
from ...core.space import Choice, Distribution, IntRange, LogUniform, Space, Uniform, grid_size, is_grid, sample

__all__ = ["Ask", "Search", "make_search", "STUDY_NAME"]

STUDY_NAME: Final = "jupyter-torchdist"


@dataclass(frozen=True)
class Ask:
    """One member to run: its parameters, and what the search needs back with its end (Optuna's trial)."""
    params: dict[str, Any]
    token: Any = None


class Search(Protocol):
    kind: str
    planned: int      # members in all (an earlier kernel's included)
    eager: bool       # every member known ahead (queued at once)

    def ask(self) -> Ask | None: ...

    def skip(self, drawn: int) -> None: ...

    def again(self, params: dict[str, Any]) -> Ask: ...

    def tell(self, token: Any, state: str, value: float | None) -> None: ...


class _Listed:
    """A grid, or draws from a space made ahead with the seed: members known before any has run."""

    eager = True

    def __init__(self, kind: str, members: list[dict[str, Any]]) -> None:
        self.kind, self._members, self.planned, self._next = kind, members, len(members), 0

    def ask(self) -> Ask | None:
        if self._next >= len(self._members):
            return None
        self._next += 1
        return Ask(dict(self._members[self._next - 1]))

    def skip(self, drawn: int) -> None:
        self._next = min(len(self._members), self._next + drawn)

    def again(self, params: dict[str, Any]) -> Ask:
        return Ask(dict(params))

    def tell(self, token: Any, state: str, value: float | None) -> None:
        return None


def _draws(space: Space, trials: int, seed: int | None) -> list[dict[str, Any]]:
    """``trials`` members drawn from ``space``; from a grid, distinct combinations while there are enough."""
    rng = random.Random(seed)
    if is_grid(space) and trials <= grid_size(space):
        return rng.sample(combinations(_grid(space)), trials)
    return [sample(space, rng) for _ in range(trials)]


class _Optuna:
    """Optuna's ask-and-tell, its default sampler (TPE); the study on the sweep's handle (``sweep.study``)."""

    eager = False
    kind = "optuna"

    def __init__(self, space: Space, trials: int, seed: int | None, mode: str, path: str | None) -> None:
        try:
            import optuna
        except ImportError:
            raise OptionsError(OPTUNA_MISSING) from None
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # a line per trial would flood the notebook
        self._optuna, self.planned, self._asked = optuna, trials, 0
        self._space = {name: _to_optuna(optuna, entry) for name, entry in space}
        self._decode = {name: entry for name, entry in space if isinstance(entry, tuple) and not _plain(entry)}
        storage = f"sqlite:///{os.path.abspath(path)}" if path else None
        self.study = optuna.create_study(storage=storage, study_name=STUDY_NAME, load_if_exists=True,
                                         direction="minimize" if mode == "min" else "maximize",
                                         sampler=optuna.samplers.TPESampler(seed=seed))
        kept = len(self.study.trials)
        if seed is not None and kept:  # a resumed study: the same seed again would draw the first members again
            self.study.sampler = optuna.samplers.TPESampler(seed=seed + kept)
        self._forget_running()

    def _forget_running(self) -> None:
        """Trials an earlier kernel left running: failed in Optuna's record (the sweep reruns their members)."""
        states = self._optuna.trial.TrialState
        for trial in self.study.get_trials(deepcopy=False, states=(states.RUNNING,)):
            self.study.tell(trial.number, state=states.FAIL)

    def ask(self) -> Ask | None:
        if self._asked >= self.planned:
            return None
        self._asked += 1
        trial = self.study.ask(self._space)
        params = {name: self._decode[name][value] if name in self._decode else value
                  for name, value in trial.params.items()}
        return Ask(params, trial.number)

    def skip(self, drawn: int) -> None:
        self._asked += drawn

    def again(self, params: dict[str, Any]) -> Ask:
        """An earlier kernel's member run again: a new trial of Optuna's with the same parameters."""
        encoded = {name: self._decode[name].index(value) if name in self._decode else value
                   for name, value in params.items()}
        self.study.enqueue_trial(encoded, skip_if_exists=False)
        trial = self.study.ask(self._space)
        return Ask(dict(params), trial.number)

    def tell(self, token: Any, state: str, value: float | None) -> None:
        if token is None:
            return
        states = self._optuna.trial.TrialState
        if state == "done" and value is not None:
            self.study.tell(token, value)
        else:
            self.study.tell(token, state=states.PRUNED if state == "pruned" else states.FAIL)


def _grid(space: Space) -> Grid:
    """A space of lists alone, as the grid it is (checked by the caller: ``is_grid``)."""
    return tuple((name, entry) for name, entry in space if isinstance(entry, tuple))


def _plain(values: tuple[Any, ...]) -> bool:
    return all(v is None or isinstance(v, (bool, int, float, str)) for v in values)


def _to_optuna(optuna: Any, entry: tuple[Any, ...] | Distribution) -> Any:
    d = optuna.distributions
    if isinstance(entry, tuple):  # a list: Optuna's categorical (by index where a value is not a plain one)
        return d.CategoricalDistribution(list(entry) if _plain(entry) else list(range(len(entry))))
    if isinstance(entry, LogUniform):
        return d.FloatDistribution(entry.low, entry.high, log=True)
    if isinstance(entry, Uniform):
        return d.FloatDistribution(entry.low, entry.high)
    if isinstance(entry, IntRange):
        return d.IntDistribution(entry.low, entry.high)
    if isinstance(entry, Choice):
        if not _plain(entry.options):
            raise OptionsError(f"Optuna's choices are numbers, strings, booleans or None; {entry} has others: "
                               "use --search random, or choose among names and look the values up in the cell")
        return d.CategoricalDistribution(list(entry.options))
    raise OptionsError(f"Optuna cannot search {entry!r}")


def make_search(space: Space, kind: str, trials: int | None, seed: int | None, mode: str,
                study: str | None) -> Search:
    """The search the options ask for (checked already: a grid's kind is grid, others have ``trials``)."""
    if kind == "grid":
        return _Listed("grid", combinations(_grid(space)))
    if kind == "random":
        return _Listed("random", _draws(space, trials or 1, seed))
    return _Optuna(space, trials or 1, seed, mode, study)
