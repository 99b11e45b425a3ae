"""A sweep's search options (``--trials``, ``--search``, ``--seed``, ``--metric``, ``--mode``, ``--early-stop``,
``--grace``, ``--reduction-factor``, ``--max-steps``, ``--metric-reduce``, ``--study``): their flags, and their
checks, run once with the other options.

A sweep over lists alone is a grid, every combination once (``--search grid``, the default there); a space with any
distribution needs ``--trials N`` members, drawn at random (the default) or by Optuna's sampler. An early-stopping
rule judges the members by the metric the ranks report with ``jupyter_torchdist.report``. The rule names and the
metric reductions are listed here once: the rules themselves (``kernel/sweeps/early_stop.py``) read these lists.
"""
from __future__ import annotations

import argparse
import importlib.util
from typing import Any, Final

from .errors import OptionsError
from .space import is_grid

__all__ = ["add_search_options", "check_search", "check_rule", "search_kind", "reduction_factor", "SEARCHES",
           "EARLY_STOPS", "MODES", "REDUCTIONS", "REDUCTION_FACTOR", "OPTUNA_MISSING"]

SEARCHES: Final = ("grid", "random", "optuna")
EARLY_STOPS: Final = ("asha", "median", "none")   # the early-stopping rules, by the name --early-stop takes
MODES: Final = ("min", "max")
REDUCTIONS: Final = ("mean", "min", "max")        # --metric-reduce: one figure from every rank's
REDUCTION_FACTOR: Final = 4   # ASHA's default, as Ray Tune's and Optuna's: the best quarter goes on at each rung
OPTUNA_MISSING: Final = ("--search optuna needs Optuna, which is not installed in the kernel's environment: "
                         "`pip install 'jupyter-torchdist[sweeps]'` (or `pip install optuna`), then restart the kernel")
_SWEEP_ONLY: Final = {"trials": "--trials", "search": "--search", "seed": "--seed", "early_stop": "--early-stop",
                      "reduction_factor": "--reduction-factor", "max_steps": "--max-steps",
                      "metric_reduce": "--metric-reduce", "study": "--study"}


def search_kind(options: Any) -> str:
    """The search a sweep runs: the one asked for, else a grid for a grid and random sampling otherwise."""
    return options.search or ("grid" if is_grid(options.sweep) else "random")


def reduction_factor(options: Any) -> int:
    """ASHA's reduction factor: the one asked for, else ``REDUCTION_FACTOR``."""
    return options.reduction_factor if options.reduction_factor is not None else REDUCTION_FACTOR


def check_search(options: Any) -> None:
    """Every search option on its own, then together with the space; nothing is rewritten."""
    if not options.sweep:
        given = [flag for key, flag in _SWEEP_ONLY.items() if getattr(options, key) not in (None, "none")]
        if given:
            raise OptionsError(f"{', '.join(given)} shape a sweep's search: use them with --sweep")
    _check_values(options)
    if not options.sweep:
        return
    kind = search_kind(options)
    if kind == "grid" and not is_grid(options.sweep):
        raise OptionsError("--search grid runs every combination of lists; this space has distributions (e.g. "
                           "loguniform(...)): use --search random or --search optuna with --trials N")
    if kind == "grid" and options.trials is not None:
        raise OptionsError("--trials N draws N members from a space, but a grid runs every combination: drop "
                           "--trials, or add --search random to draw N combinations at random")
    if kind != "grid" and options.trials is None:
        raise OptionsError(f"a {kind} search needs --trials N, how many members to run (e.g. --trials 16)")
    if kind == "optuna" and importlib.util.find_spec("optuna") is None:
        raise OptionsError(OPTUNA_MISSING)


def check_rule(early_stop: Any, mode: Any, grace: Any, reduction: Any = None, max_steps: Any = None) -> None:
    """An early-stopping rule's settings, each on its own and together: the one check both the options and the
    rules' own constructors make, so a rule that could never stop anyone is refused where it is written."""
    if early_stop not in EARLY_STOPS:
        raise OptionsError(f"--early-stop must be one of {', '.join(EARLY_STOPS)}, got {early_stop!r}")
    if mode not in MODES:
        raise OptionsError(f"--mode must be min (a lower metric is better) or max, got {mode!r}")
    if not _whole(grace) or grace < 1:
        raise OptionsError(f"--grace must be a whole number of steps >= 1 (e.g. --grace 10), got {grace!r}")
    if reduction is not None:
        if not _whole(reduction) or reduction < 2:
            raise OptionsError(f"--reduction-factor must be a whole number >= 2 (ASHA lets the best 1/N of the "
                               f"members at each rung go on; e.g. --reduction-factor 4), got {reduction!r}")
        if early_stop != "asha":
            raise OptionsError(f"--reduction-factor spaces ASHA's rungs; --early-stop is {early_stop}: add "
                               "--early-stop asha, or drop --reduction-factor")
    if max_steps is not None:
        if not _whole(max_steps) or max_steps < 1:
            raise OptionsError(f"--max-steps must be a whole number of steps (the steps each member runs, e.g. "
                               f"--max-steps 100), got {max_steps!r}")
        if early_stop == "none":
            raise OptionsError("--max-steps bounds where an early-stopping rule judges: use it with --early-stop "
                               "asha or median")
        if max_steps <= grace:
            raise OptionsError(f"--max-steps {max_steps} is not past --grace {grace}: no member would ever be "
                               f"judged. Lower --grace, or give the steps the members run")


def _check_values(options: Any) -> None:
    if options.trials is not None and (not _whole(options.trials) or options.trials < 1):
        raise OptionsError(f"--trials must be a whole number of members >= 1 (e.g. --trials 16), "
                           f"got {options.trials!r}")
    if options.search is not None and options.search not in SEARCHES:
        raise OptionsError(f"--search must be one of {', '.join(SEARCHES)}, got {options.search!r}")
    if options.seed is not None and not _whole(options.seed):
        raise OptionsError(f"--seed must be a whole number (e.g. --seed 0), got {options.seed!r}")
    if not isinstance(options.metric, str) or not options.metric.strip() or len(options.metric) > 40:
        raise OptionsError(f"--metric names what the ranks report with jupyter_torchdist.report(NAME=...) (at most "
                           f"40 characters, e.g. --metric val_loss), got {options.metric!r}")
    check_rule(options.early_stop, options.mode, options.grace, options.reduction_factor, options.max_steps)
    if options.metric_reduce is not None and options.metric_reduce not in REDUCTIONS:
        raise OptionsError(f"--metric-reduce must be one of {', '.join(REDUCTIONS)}, got {options.metric_reduce!r}")
    if options.study is not None and (not isinstance(options.study, str) or not options.study.strip()):
        raise OptionsError(f"--study must be a file path (a SQLite file, e.g. --study lr.db), got {options.study!r}")


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def add_search_options(p: argparse.ArgumentParser, whole: Any) -> None:
    """The flags, beside --sweep (``whole`` turns a flag's text into a whole number with a clear error)."""
    p.add_argument("--trials", type=whole, metavar="N",
                   help="(with --sweep) how many members a random or Optuna search runs")
    p.add_argument("--search", choices=SEARCHES,
                   help="(with --sweep) grid: every combination (the default for lists alone); random: --trials "
                        "draws from the space (the default with a distribution); optuna: Optuna's sampler (TPE), "
                        "told each member's curve and end")
    p.add_argument("--seed", type=whole, metavar="S", help="(with --sweep) makes a random or Optuna search repeatable")
    p.add_argument("--metric", default="loss", metavar="NAME",
                   help="what the ranks report with jupyter_torchdist.report(NAME=...) that judges the members "
                        "(default loss); sweep.best() picks by it")
    p.add_argument("--mode", choices=MODES, default="min", help="min (default): a lower metric is better; max")
    p.add_argument("--early-stop", choices=EARLY_STOPS, default="none",
                   help="(with --sweep) stop members whose metric at a rung is worse than their peers': asha "
                        "(asynchronous successive halving) or median (the median stopping rule)")
    p.add_argument("--grace", type=whole, default=1, metavar="STEPS",
                   help="(with --early-stop) the first step at which a member may be judged (default 1; ASHA's "
                        "rungs are STEPS x 1, 4, 16, ...)")
    p.add_argument("--reduction-factor", type=whole, metavar="N",
                   help=f"(with --early-stop asha) the best 1/N of the members at each rung go on, and the rungs are "
                        f"N times apart (default {REDUCTION_FACTOR})")
    p.add_argument("--max-steps", type=whole, metavar="STEPS",
                   help="(with --early-stop) the steps each member runs: ASHA's rungs stop below it, and no member is "
                        "judged at or past it")
    p.add_argument("--metric-reduce", choices=REDUCTIONS,
                   help="(with --early-stop) judge by the mean, min or max of every rank's metric at a step "
                        "(default: rank 0's)")
    p.add_argument("--study", metavar="PATH",
                   help="(with --sweep) a SQLite file that keeps the members' parameters, states and metrics: the "
                        "same cell run again (after a kernel restart) goes on where the search stopped")
