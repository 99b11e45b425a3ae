"""A sweep started: its search made, its study opened (an earlier kernel's members sorted into ended, to run again,
and another live kernel's), and its members' runs made as the search draws them, each with a commit folder of its
own. The magic's ``--sweep`` and ``jupyter_torchdist.sweep`` both come here; the handle and its thread are
``sweep.py``'s."""
from __future__ import annotations

from collections.abc import Callable, Mapping
import random
import secrets
from dataclasses import replace
from typing import Any

from ...core.errors import OptionsError
from ...core.options import RunOptions
from ...core.search_options import reduction_factor, search_kind
from ...core.space import Choice, Space, describe_space
from ...launchers.limits import check_background
from ...rank.sweep_params import WithGlobals
from ..runs.history import background_going
from ..runs.driver import RunDriver, Work, prepare_background
from .search import make_search
from .study import ENDED_FOR_GOOD, Member, StudyStore, commit_folder, open_study, storable
from .sweep import Sweep
from ...tracking import check_environment, sweep_recorder

__all__ = ["start_sweep", "sweep_cell", "sweep_function"]


def start_sweep(make_work: Callable[[dict[str, Any]], Work], options: RunOptions, view: Any, title: str) -> Sweep:
    """The sweep's handle, its members queued (or, for Optuna's search, drawn as slots free) and its thread going."""
    most = check_background(background_going(), options.concurrent)
    kind = search_kind(options)
    if options.track or options.profile is not None:
        check_environment(options)
    store, past, again, drawn = _study(options, kind) if options.study else (None, [], [], 0)
    try:
        seed = options.seed
        if kind == "random" and seed is None:   # a seed of its own, the study's when it has one: the same order
            seed = random.SystemRandom().randrange(1 << 62)
            seed = store.draw_seed(seed) if store is not None else seed
        search = make_search(options.sweep, kind, options.trials, seed, options.mode, options.study)
        search.skip(drawn)
        member_options = replace(options, background=True, detach=False, sweep=(), concurrent=None, output=None,
                                 trials=None, search=None, seed=None, early_stop="none", reduction_factor=None,
                                 max_steps=None, metric_reduce=None, study=None)   # detached: the sweep as a whole
        sweep = Sweep(title, options, view, search, store)
        sweep.most = most
        sweep.recorder = parent = sweep_recorder(options, title)
        tag = secrets.token_hex(3)

        def make(member: Member) -> RunDriver:
            """A member's run, queued: its parameters, and its own commit folder (under --checkpoint-dir, or beside
            the study when its ranks share this machine), so a member run again resumes from its last commit."""
            folder = commit_folder(options.study, options.checkpoint_dir, member.number, tag)
            mine = replace(member_options, checkpoint_dir=folder) if options.checkpoint_dir is not None else \
                member_options
            return prepare_background(make_work(member.params), mine, sweep.members, member.params, parent,
                                      commits=folder if options.checkpoint_dir is None else None)

        sweep.begin(make, past, again, drawn)
    except BaseException:
        if store is not None:
            store.close()
        raise
    return sweep


def _study(options: RunOptions, kind: str) -> tuple[StudyStore, list[Member], list[Member], int]:
    """The study file, claimed; its members that ended for good, those to run again (queued anew, taken over from
    sweeps that are gone), and how many members earlier kernels drew (another live kernel's included: they are
    left to it). A changed space, search, metric, mode, seed or rule is refused."""
    _check_storable(options.sweep)
    signature = {"space": describe_space(options.sweep), "search": kind, "metric": options.metric,
                 "mode": options.mode, "seed": options.seed, "early_stop": options.early_stop,
                 "grace": options.grace if options.early_stop != "none" else None,
                 "reduction_factor": reduction_factor(options) if options.early_stop == "asha" else None,
                 "max_steps": options.max_steps, "metric_reduce": options.metric_reduce}
    store = open_study(options.study or "", signature)
    try:
        kept = store.members()
        live = store.live_owners()
        past = [m for m in kept if m.state in ENDED_FOR_GOOD]
        orphans = [m for m in kept if m.state not in ENDED_FOR_GOOD and m.owner not in live]
        again = [Member(m.number, m.params, token=m.token) for m in store.take(orphans)]
    except BaseException:
        store.close()
        raise
    return store, past, again, len(kept)


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
