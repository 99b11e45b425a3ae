"""Where a sweep's members come from: a grid's combinations, draws from a space, or Optuna's sampler.

A grid and a random search know every member ahead (``eager``): the sweep queues them all at once, as a grid always
did. A random search draws from one seeded order that does not depend on ``--trials``: over lists alone, a seeded
shuffle of the whole grid (every combination once before any repeats), else draw ``i`` from a stream of its own,
seeded by the seed and ``i``; so a search resumed with more trials only adds members (``skip`` passes those an
earlier kernel drew). Optuna's sampler learns from the members as they go, so each member is asked for when a slot
frees (ask-and-tell): ``ask()`` gives the next parameters and a token, ``report`` each point of the member's curve
(Optuna's intermediate values: a stopped member's curve counts too), ``tell(token, state, value)`` its end.
"""
from __future__ import annotations

import os
import random
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Protocol

from ...core.errors import OptionsError
from ...core.grid import Grid, combinations
from ...core.search_options import OPTUNA_MISSING
from ...core.space import Choice, Distribution, IntRange, LogUniform, Space, Uniform, is_grid, sample
from .study import STALE_S

__all__ = ["Ask", "Search", "make_search", "draws", "STUDY_NAME", "HEARTBEAT_S"]

STUDY_NAME: Final = "jupyter-torchdist"
HEARTBEAT_S: Final = 5   # a running trial's heartbeat in Optuna's record: another process sees it is alive
_QUIET: Final = (   # Optuna's notes on what we use as it documents: they would print in the notebook, every ask
    "Heartbeat of storage is supposed to be used with Study.optimize",
    r"Argument ``(heartbeat_interval|constant_liar)`` is an experimental feature",
    r".*fail_stale_trials is experimental",
)


@dataclass(frozen=True)
class Ask:
    """One member to run: its parameters, and what the search needs back with its end (Optuna's trial number)."""
    params: dict[str, Any]
    token: Any = None


class Search(Protocol):
    kind: str
    planned: int      # members in all (an earlier kernel's included)
    eager: bool       # every member known ahead (queued at once)

    def ask(self) -> Ask | None: ...

    def skip(self, drawn: int) -> None: ...

    def again(self, params: dict[str, Any], token: Any = None) -> Ask: ...

    def report(self, token: Any, points: list[tuple[int, float]]) -> None: ...

    def beat(self) -> None: ...

    def tell(self, token: Any, state: str, value: float | None) -> None: ...


def draws(space: Space, seed: int) -> Iterator[dict[str, Any]]:
    """The random search's members, in order, for ever: from a grid, each pass a seeded shuffle of every combination
    (the first ``size`` draws are distinct); otherwise draw ``i`` from ``random.Random`` seeded with the seed and
    ``i`` alone. Either way the first N draws are the same whatever N is asked later."""
    if is_grid(space):
        combos = combinations(_grid(space))
        rounds = 0
        while True:
            order = list(range(len(combos)))
            random.Random(f"jupyter-torchdist grid {seed} {rounds}").shuffle(order)
            yield from (dict(combos[k]) for k in order)
            rounds += 1
    index = 0
    while True:
        yield sample(space, random.Random(f"jupyter-torchdist draw {seed} {index}"))
        index += 1


class _Listed:
    """A grid, or draws from a space in their seeded order: members known before any has run."""

    eager = True

    def __init__(self, kind: str, members: Iterator[dict[str, Any]], planned: int) -> None:
        self.kind, self._members, self.planned, self._next = kind, members, planned, 0

    def ask(self) -> Ask | None:
        if self._next >= self.planned:
            return None
        self._next += 1
        return Ask(next(self._members))

    def skip(self, drawn: int) -> None:
        for _ in range(min(drawn, self.planned - self._next)):
            next(self._members)
            self._next += 1

    def again(self, params: dict[str, Any], token: Any = None) -> Ask:
        return Ask(dict(params))

    def report(self, token: Any, points: list[tuple[int, float]]) -> None:
        return None

    def beat(self) -> None:
        return None

    def tell(self, token: Any, state: str, value: float | None) -> None:
        return None


class _Optuna:
    """Optuna's ask-and-tell, its default sampler (TPE) with ``constant_liar`` (members asked while others run are
    kept apart); the study on the sweep's handle (``sweep.study``). In a study file, Optuna's heartbeat marks the
    trials this kernel runs as alive, so another kernel (or Optuna process) on the same study leaves them be."""

    eager = False
    kind = "optuna"

    def __init__(self, space: Space, trials: int, seed: int | None, mode: str, path: str | None) -> None:
        try:
            import optuna
        except ImportError:
            raise OptionsError(OPTUNA_MISSING) from None
        for said in _QUIET:
            warnings.filterwarnings("ignore", message=said)
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # a line per trial would flood the notebook
        self._optuna, self.planned, self._asked = optuna, trials, 0
        self._space = {name: _to_optuna(optuna, entry) for name, entry in space}
        self._decode = {name: entry for name, entry in space if isinstance(entry, tuple) and not _plain(entry)}
        self._storage = None if path is None else optuna.storages.RDBStorage(
            f"sqlite:///{os.path.abspath(path)}", heartbeat_interval=HEARTBEAT_S, grace_period=int(STALE_S))
        self.study = optuna.create_study(storage=self._storage, study_name=STUDY_NAME, load_if_exists=True,
                                         direction="minimize" if mode == "min" else "maximize",
                                         sampler=self._sampler(seed))
        kept = len(self.study.trials)
        if seed is not None and kept:  # a resumed study: the same seed again would draw the first members again
            self.study.sampler = self._sampler(seed + kept)
        if self._storage is not None:
            optuna.storages.fail_stale_trials(self.study)   # trials whose process stopped beating, not live ones
        self._running: dict[int, Any] = {}   # trial number -> Optuna's Trial, while its member runs here
        self._reported: dict[int, int] = {}  # trial number -> the last step reported

    def _sampler(self, seed: int | None) -> Any:
        return self._optuna.samplers.TPESampler(seed=seed, constant_liar=True)

    def ask(self) -> Ask | None:
        if self._asked >= self.planned:
            return None
        self._asked += 1
        trial = self.study.ask(self._space)
        self._running[trial.number] = trial
        return Ask(self._params(trial.params), trial.number)

    def _params(self, values: dict[str, Any]) -> dict[str, Any]:
        return {name: self._decode[name][value] if name in self._decode else value for name, value in values.items()}

    def skip(self, drawn: int) -> None:
        self._asked += drawn

    def again(self, params: dict[str, Any], token: Any = None) -> Ask:
        """An earlier kernel's member run again: a new trial of Optuna's with the same parameters; its old trial
        (``token``), if Optuna still has it running, is marked failed (that kernel is gone)."""
        states = self._optuna.trial.TrialState
        if token is not None:
            try:
                self.study.tell(token, state=states.FAIL, skip_if_finished=True)
            except Exception:
                pass   # a trial Optuna no longer has: nothing to mark
        encoded = {name: self._decode[name].index(value) if name in self._decode else value
                   for name, value in params.items()}
        self.study.enqueue_trial(encoded, skip_if_exists=False)
        trial = self.study.ask(self._space)
        self._running[trial.number] = trial
        return Ask(dict(params), trial.number)

    def report(self, token: Any, points: list[tuple[int, float]]) -> None:
        """Points of a member's curve, as Optuna's intermediate values (``trial.report``), each step once."""
        trial = self._running.get(token)
        if trial is None:
            return
        last = self._reported.get(token, -1)
        for step, value in points:
            if step > last:
                trial.report(value, step)
                last = step
        self._reported[token] = last

    def beat(self) -> None:
        """The trials this kernel runs are alive (Optuna's heartbeat, in a study file)."""
        if self._storage is None:
            return
        for trial in list(self._running.values()):
            self._storage.record_heartbeat(trial._trial_id)   # Optuna's own heartbeat thread passes the same id

    def tell(self, token: Any, state: str, value: float | None) -> None:
        if token is None:
            return
        self._running.pop(token, None)
        self._reported.pop(token, None)
        states = self._optuna.trial.TrialState
        if state == "done" and value is not None:
            self.study.tell(token, value)
        else:   # a stopped-early trial's value is its last reported one (Optuna's own rule for PRUNED)
            self.study.tell(token, state=states.PRUNED if state == "stopped_early" else states.FAIL)


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
    """The search the options ask for (checked already: a grid's kind is grid, others have ``trials``). A random
    search without a seed gets one of its own (a study keeps it: ``StudyStore.draw_seed``)."""
    if kind == "grid":
        combos = combinations(_grid(space))
        return _Listed("grid", (dict(c) for c in combos), len(combos))
    if kind == "random":
        return _Listed("random", draws(space, random.SystemRandom().randrange(1 << 62) if seed is None else seed),
                       trials or 1)
    return _Optuna(space, trials or 1, seed, mode, study)
