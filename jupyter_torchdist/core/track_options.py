"""Tracking and profiling options (``--track``, ``--experiment``, ``--logdir``, ``--profile``): their flags, the
default tracker (``%config DistributeMagics.track``, then ``JUPYTER_TORCHDIST_TRACK``) and their checks. The trackers
themselves are the registry's (``core/trackers.py``).

Checked twice, both before any rank starts: ``check_track`` with the other options (names, windows, combinations;
no I/O), ``check_environment`` when a run is about to be made (the trackers installed, the log folder writable, the
journal's bound readable).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
from typing import Any, Final

from .errors import OptionsError
from .trackers import REGISTRY, experiment_trackers
from .trackers import names as tracker_names

__all__ = ["bare_profile", "TRACKERS", "TRACK_ENV", "AUTO_WINDOW", "DEFAULT_LOGDIR", "add_track_options",
           "parse_trackers", "parse_window", "check_track", "check_environment", "default_trackers",
           "configure_default", "MLFLOW_MISSING", "TENSORBOARD_MISSING", "JOURNAL_ENV", "DEFAULT_JOURNAL_MB",
           "journal_bound"]

TRACKERS: Final = tracker_names()
TRACK_ENV: Final = "JUPYTER_TORCHDIST_TRACK"
JOURNAL_ENV: Final = "JUPYTER_TORCHDIST_JOURNAL_MB"
DEFAULT_JOURNAL_MB: Final = 1024
AUTO_WINDOW: Final = (-1, -1)   # --profile alone: the rank picks a few steps after the first
DEFAULT_LOGDIR: Final = "runs"
MLFLOW_MISSING: Final = REGISTRY["mlflow"].missing
TENSORBOARD_MISSING: Final = REGISTRY["tensorboard"].missing
_WINDOW = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")


class _Default:
    configured: str | None = None   # %config DistributeMagics.track (the magics set it when it changes)


def configure_default(track: str | None) -> None:
    """The notebook's default tracker (``%config DistributeMagics.track = "mlflow"``); None or "": none set."""
    _Default.configured = track or None


def parse_trackers(text: str, where: str = "--track") -> tuple[str, ...]:
    """A tracker's name (``trackers.REGISTRY``), several (``"mlflow,tensorboard"``), or ``"none"``/``""`` (no
    tracking)."""
    names = [part.strip().lower() for part in str(text).split(",") if part.strip()]
    if names in ([], ["none"]):
        return ()
    unknown = [n for n in names if n not in TRACKERS]
    if unknown:
        raise OptionsError(f"{where}: unknown tracker {unknown[0]!r}; it takes {', '.join(TRACKERS)}, or several "
                           "(mlflow,tensorboard); none turns tracking off")
    return tuple(dict.fromkeys(names))


def default_trackers() -> tuple[str, ...]:
    """What a run without ``--track`` records: the notebook's ``%config`` setting, else the environment's."""
    if _Default.configured is not None:
        return parse_trackers(_Default.configured, "DistributeMagics.track")
    return parse_trackers(os.environ.get(TRACK_ENV, ""), TRACK_ENV)


def parse_window(text: str) -> tuple[int, int]:
    """``"5:10"``: steps 5 up to 10 (not included), as a slice reads; ``"auto"``: a few steps after the first."""
    if text == "auto":
        return AUTO_WINDOW
    match = _WINDOW.match(text)
    if match is None:
        raise OptionsError(f"--profile takes a window of steps START:STOP (e.g. --profile 5:10 profiles steps 5 to 9), "
                           f"or nothing for a few steps after the first; got {text!r}")
    return int(match.group(1)), int(match.group(2))


def bare_profile(argv: list[str]) -> list[str]:
    """``--profile`` followed by something that is not a window (``--profile train.py``, ``--profile -n 2``) is the
    flag alone: its default window, the script left to be the script."""
    out = list(argv)
    for i, token in enumerate(out):
        if token == "--":
            break
        if token == "--profile" and (i + 1 == len(out) or not (_WINDOW.match(out[i + 1]) or out[i + 1] == "auto")):
            if i + 1 < len(out) and (":" in out[i + 1] or out[i + 1].isdigit()):
                continue   # a window written wrong: the parser says so
            out.insert(i + 1, "auto")
            break
    return out


def _window_arg(text: str) -> tuple[int, int]:
    try:
        return parse_window(text)
    except OptionsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _trackers_arg(text: str) -> tuple[str, ...]:
    try:
        return parse_trackers(text)
    except OptionsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_track_options(p: Any) -> None:
    p.add_argument("--track", type=_trackers_arg, default=None, metavar="|".join(TRACKERS),
                   help="record the run: mlflow (one MLflow run, written by the kernel: the options, every number "
                        "rank 0 reports by step, tags, the report), tensorboard (scalar and hparams event files under "
                        "--logdir), wandb (one Weights & Biases run), several with commas (mlflow,tensorboard), none "
                        f"for none (default: %%config DistributeMagics.track, else ${TRACK_ENV})")
    p.add_argument("--experiment", metavar="NAME",
                   help="the MLflow experiment, the W&B project (default: the notebook's name; for W&B, "
                        "$WANDB_PROJECT first)")
    p.add_argument("--logdir", metavar="DIR",
                   help=f"where TensorBoard's event files and profiles go, a folder per run (default "
                        f"{DEFAULT_LOGDIR}/ beside the notebook)")
    p.add_argument("--profile", nargs="?", const=AUTO_WINDOW, type=_window_arg, metavar="START:STOP",
                   help="profile every rank with torch.profiler for steps START to STOP-1 (the step numbers given to "
                        "report(step=...); alone: a few steps after the first): a trace per rank under --logdir and "
                        "a summary of where each rank's step time goes")


def check_track(options: Any) -> None:
    """The tracking options on their own and with the rest; nothing is rewritten."""
    track, profile = options.track, options.profile
    if not isinstance(track, tuple) or any(name not in TRACKERS for name in track):
        raise OptionsError(f"track must be a tuple of tracker names from {TRACKERS}, got {track!r}")
    if options.experiment is not None and (not isinstance(options.experiment, str) or not options.experiment.strip()):
        raise OptionsError(f"--experiment must be a name (an MLflow experiment, a W&B project), got "
                           f"{options.experiment!r}")
    takers = experiment_trackers()
    if options.experiment is not None and not set(takers) & set(track):
        said = " or ".join(f"--track {t}" for t in takers)
        named = " or ".join(str(REGISTRY[t].experiment) for t in takers)
        raise OptionsError(f"--experiment names {named} the run goes in: use it with {said}")
    if options.logdir is not None and (not isinstance(options.logdir, str) or not options.logdir.strip()):
        raise OptionsError(f"--logdir must be a folder, got {options.logdir!r}")
    if options.logdir is not None and not any(REGISTRY[t].files for t in track) and profile is None:
        raise OptionsError("--logdir is where TensorBoard's files and profiles go: use it with --track tensorboard "
                           "or --profile")
    if profile is not None:
        if (not isinstance(profile, tuple) or len(profile) != 2 or any(not isinstance(s, int) for s in profile)
                or (profile != AUTO_WINDOW and not 0 <= profile[0] < profile[1])):
            raise OptionsError(f"--profile START:STOP needs 0 <= START < STOP (e.g. --profile 5:10), got {profile!r}")
    if (track or profile is not None) and options.keep:
        raise OptionsError("--track and --profile record one run on fresh ranks; kept ranks (--keep) run many cells: "
                           "drop --keep to track or profile this cell")


def check_environment(options: Any) -> None:
    """Before a tracked or profiled run is made: its trackers are installed, its log folder takes files, and the
    journal's bound (``JUPYTER_TORCHDIST_JOURNAL_MB``) is a size."""
    for name in options.track:
        if importlib.util.find_spec(REGISTRY[name].package) is None:
            raise OptionsError(REGISTRY[name].missing)
    if any(REGISTRY[name].files for name in options.track) or options.profile is not None:
        _check_writable(options.logdir or DEFAULT_LOGDIR)
    if options.track:
        journal_bound()


def journal_bound() -> int:
    """The most bytes the records not yet sent may take on this machine (``JUPYTER_TORCHDIST_JOURNAL_MB``, an
    administrator's setting; 1024 MB unless set)."""
    text = os.environ.get(JOURNAL_ENV, "").strip()
    if not text:
        return DEFAULT_JOURNAL_MB * 1024 * 1024
    try:
        mb = float(text)
    except ValueError:
        mb = -1.0
    if not mb > 0:
        raise OptionsError(f"{JOURNAL_ENV} is the most megabytes the tracking records not yet sent may take on this "
                           f"machine, a number above 0 (e.g. {JOURNAL_ENV}=2048); got {text!r}")
    return int(mb * 1024 * 1024)


def _check_writable(folder: str) -> None:
    path = os.path.abspath(os.path.expanduser(folder))
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".jupyter-torchdist-{os.getpid()}")
        with open(probe, "w") as f:
            f.write("")
        os.remove(probe)
    except OSError as exc:
        raise OptionsError(f"--logdir {folder!r} cannot take files ({exc.strerror or exc}): give a folder this "
                           "kernel can write, e.g. --logdir ~/runs") from None
