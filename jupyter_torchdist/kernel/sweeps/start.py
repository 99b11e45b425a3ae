"""A sweep started: its search made, its study opened (an earlier kernel's members sorted into ended and to run
again), and its members' runs made as the search draws them. The magic's ``--sweep`` and ``jupyter_torchdist.sweep``
both come here; the handle and its thread are ``sweep.py``'s."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ...core.errors import OptionsError
from ...core.options import RunOptions
from ...core.search_options import search_kind
from ...core.space import Choice, Space, describe_space
from ...launchers.limits import check_background
from ...rank.sweep_params import WithGlobals
from ..runs.registry import background_going
from ..runs.launch import Work, prepare_background
from .search import make_search
from .study import ENDED_FOR_GOOD, Member, StudyStore, open_study, storable
from .sweep import Sweep
from ...tracking import check_environment, sweep_recorder

__all__ = ["start_sweep", "sweep_cell", "sweep_function"]


def start_sweep(make_work: Callable[[dict[str, Any]], Work], options: RunOptions, view: Any, title: str) -> Sweep:
    """The sweep's handle, its members queued (or, for Optuna's search, drawn as slots free) and its thread going."""
    most = check_background(background_going(), options.concurrent)
    kind = search_kind(options)
    if options.track or options.profile is not None:
        check_environment(options)
    store, past, again = _study(options, kind) if options.study else (None, [], [])
    try:
        search = make_search(options.sweep, kind, options.trials, options.seed, options.mode, options.study)
        search.skip(len(past) + len(again))
        member_options = replace(options, background=True, sweep=(), concurrent=None, output=None, trials=None,
                                 search=None, seed=None, early_stop="none", metric_reduce=None, study=None)
        sweep = Sweep(title, options, view, search, store)
        sweep.most = most
        sweep.recorder = parent = sweep_recorder(options, title)
        sweep.begin(lambda params: prepare_background(make_work(params), member_options, sweep.members, params,
                                                      parent), past, again)
    except BaseException:
        if store is not None:
            store.close()
        raise
    return sweep


def _study(options: RunOptions, kind: str) -> tuple[StudyStore, list[Member], list[Member]]:
    """The study file, claimed; its members that ended for good, and those to run again (queued anew)."""
    _check_storable(options.sweep)
    signature = {"space": describe_space(options.sweep), "search": kind, "metric": options.metric,
                 "mode": options.mode, "seed": options.seed}
    store = open_study(options.study or "", signature)
    kept = store.members()
    past = [m for m in kept if m.state in ENDED_FOR_GOOD]
    again = [Member(m.number, m.params) for m in kept if m.state not in ENDED_FOR_GOOD]
    return store, past, again


def _check_storable(space: Space) -> None:
    for name, entry in space:
        values = entry.options if isinstance(entry, Choice) else entry if isinstance(entry, tuple) else ()
        if not storable({name: list(values)}):
            raise OptionsError(f"--study keeps each member's parameters as Python literals; {name!r} has values that "
                               "are not (objects made in the notebook): sweep over names or numbers and look the "
                               "objects up in the cell, or drop --study")


def sweep_cell(fn: Callable[..., Any], options: RunOptions, view: Any, *, title: str, filename: str,
               source: str) -> Sweep:
    """A cell's sweep: each member's names set as the cell's globals on the ranks."""
    return start_sweep(lambda params: Work(WithGlobals(fn, params), title=title, filename=filename, source=source),
                       options, view, title)


def sweep_function(fn: Callable[..., Any], options: RunOptions, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                   view: Any) -> Sweep:
    """A function's sweep: each member's parameters given as keyword arguments."""
    title = f"sweep({getattr(fn, '__name__', 'fn')}) -n {options.n}"
    return start_sweep(lambda params: Work(fn, args, {**kwargs, **params}, title=title), options, view, title)
