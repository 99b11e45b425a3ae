"""What the user asked for: parsed once, validated once, frozen."""
from __future__ import annotations

import argparse
import difflib
import math
import re
import shlex
from dataclasses import dataclass

from .errors import OptionsError
from .search_options import add_search_options, check_search
from .track_options import add_track_options, bare_profile, check_track, default_trackers
from .space import Space, merge_spaces, parse_space

__all__ = ["RunOptions", "OptionsError", "parse_options", "parse_argv", "options_help", "option_arity", "MAGIC_PROG",
           "CLI_PROG"]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DEFAULT_MAX_PAYLOAD_MB = 512.0
DEFAULT_MAX_VALUE_MB = 512.0
DEFAULT_WAIT_S = 120.0
DEFAULT_STALL_AFTER_S = 30.0


@dataclass(frozen=True)
class RunOptions:
    n: int = 2
    gpu: bool = False
    output: str | None = None
    timeout: float | None = None
    local: bool = False
    backend_threads: int | None = None
    max_payload_mb: float = DEFAULT_MAX_PAYLOAD_MB
    max_value_mb: float = DEFAULT_MAX_VALUE_MB
    all_ranks: bool = False
    quiet: bool = False
    script: tuple[str, ...] = ()
    keep: bool = False
    data_workers: int | None = None  # Spark tasks making batches() data (default: the slots beyond the ranks')
    n_explicit: bool = True  # -n was given (a --keep cell without -n runs on the kept ranks, however many)
    wait: float = DEFAULT_WAIT_S  # on a cluster, how long to wait for enough task slots (executors still coming)
    max_restarts: int = 0         # start the run again this many times after a failure from outside its code
    checkpoint_dir: str | None = None  # where jt.commit writes (default: a folder of the kernel's, ranks on its host)
    spark_tasks: bool = False     # the ranks must be Spark tasks (TorchDistributor(local_mode=False), horovod.spark)
    stall_after: float = DEFAULT_STALL_AFTER_S  # no progress, a rank this long in a collective: stalled (0: never)
    pdb: bool = False        # the root-cause rank's post-mortem in the notebook before the run fails
    background: bool = False  # the cell returns a handle at once; the run goes on while other cells execute
    detach: bool = False      # a background run that goes on without its kernel (a runner of its own: detached/)
    sweep: Space = ()         # run the cell once per member of this space (a grid's combinations; background runs)
    concurrent: int | None = None  # a sweep's runs at once (default: as many as the slots allow)
    trials: int | None = None      # a random or Optuna search's members (core/search_options.py: these 11)
    search: str | None = None      # grid | random | optuna (None: grid for a grid, random otherwise)
    seed: int | None = None
    metric: str = "loss"           # what judges the members (jupyter_torchdist.report(loss=...))
    mode: str = "min"
    early_stop: str = "none"       # asha | median | none
    grace: int = 1                 # the first step the early-stopping rule may judge a member at
    reduction_factor: int | None = None  # ASHA's (None: its default, 4)
    max_steps: int | None = None   # the steps each member runs: no rung at or past it
    metric_reduce: str | None = None  # mean | min | max over the ranks (None: rank 0's)
    study: str | None = None       # a SQLite file the search is kept in (resumable)
    track: tuple[str, ...] = ()    # mlflow, tensorboard (core/track_options.py: these four)
    experiment: str | None = None  # the MLflow experiment (default: the notebook's name)
    logdir: str | None = None      # TensorBoard's files and profiles (default runs/)
    profile: tuple[int, int] | None = None  # torch.profiler's window of steps, START:STOP (AUTO_WINDOW: a few)
    # Set by the distributor classes, not by options: packages every rank's Python must have at the kernel's
    # versions (DeepSpeed's), and the session setting that lets a run go where Spark encrypts (pyspark's name for
    # that class; None: TorchDistributor's pytorch.spark.distributor.ignoreSsl).
    packages: tuple[str, ...] = ()
    ssl_switch: str | None = None
    # pyspark's TorchDistributor layout (the distributor classes, local_mode=False): each Spark task's ranks are a
    # node of their own, as pyspark's torchrun per task makes them; and the GPUs ranks on this machine take, in rank
    # order (its local mode's draw from the driver's GPUs; empty: the kernel's visible ones).
    task_nodes: bool = False
    gpus: tuple[str, ...] = ()
    # The notebook's code on every rank (docs/user-guide/your-code.md): the ranks' working directory (None: the
    # notebook's folder; "none": no folder travels), packages to install on each host, a requirements file.
    workdir: str | None = None
    pip: tuple[str, ...] = ()
    requirements: str | None = None

    def __post_init__(self) -> None:
        if not _whole(self.n) or self.n < 1:
            raise OptionsError(f"-n/--nprocs must be a whole number of ranks >= 1 (e.g. -n 2), got {self.n!r}")
        if self.output is not None and not _IDENT.match(self.output):
            raise OptionsError(f"-o/--output must be a Python name to store the value in (e.g. -o model), "
                               f"got {self.output!r}")
        if self.timeout is not None and not _finite_positive(self.timeout):
            raise OptionsError(f"--timeout must be a number of seconds > 0 (e.g. --timeout 600), got {self.timeout!r}")
        if self.backend_threads is not None and (not _whole(self.backend_threads) or self.backend_threads < 1):
            raise OptionsError(f"--threads must be a whole number >= 1 (e.g. --threads 4), "
                               f"got {self.backend_threads!r}")
        if self.data_workers is not None and (not _whole(self.data_workers) or self.data_workers < 1):
            raise OptionsError(f"--data-workers must be a whole number >= 1 (e.g. --data-workers 4), "
                               f"got {self.data_workers!r}")
        if not (_finite_positive(self.wait) or self.wait == 0) or isinstance(self.wait, bool):
            raise OptionsError(f"--wait must be a number of seconds >= 0 (e.g. --wait 300; 0 fails at once when the "
                               f"session has too few task slots), got {self.wait!r}")
        if not _whole(self.max_restarts) or self.max_restarts < 0:
            raise OptionsError(f"--max-restarts must be a whole number >= 0 (e.g. --max-restarts 2), "
                               f"got {self.max_restarts!r}")
        if self.checkpoint_dir is not None and (not isinstance(self.checkpoint_dir, str)
                                                or not self.checkpoint_dir.strip()):
            raise OptionsError(f"--checkpoint-dir must be a folder or a URL every rank can write (e.g. "
                               f"--checkpoint-dir /shared/ckpt or s3://bucket/run1), got {self.checkpoint_dir!r}")
        _check_debug(self)
        _check_code(self)
        _check_background(self)
        check_track(self)
        if not _finite_positive(self.max_payload_mb):
            raise OptionsError(f"--max-payload-mb must be a number of megabytes > 0 (e.g. --max-payload-mb 1024), "
                               f"got {self.max_payload_mb!r}")
        if not _finite_positive(self.max_value_mb):
            raise OptionsError(f"--max-value-mb must be a number of megabytes > 0 (e.g. --max-value-mb 1024), "
                               f"got {self.max_value_mb!r}")

    @property
    def max_payload_bytes(self) -> int:
        return int(self.max_payload_mb * (1 << 20))

    @property
    def max_value_bytes(self) -> int:
        return int(self.max_value_mb * (1 << 20))

    def summary(self) -> dict[str, object]:
        """JSON-able view of the options, for reports."""
        return {
            "n": self.n, "gpu": self.gpu, "output": self.output, "timeout": self.timeout,
            "local": self.local, "all_ranks": self.all_ranks, "keep": self.keep,
            "data_workers": self.data_workers, "script": list(self.script) or None,
            "max_restarts": self.max_restarts or None, "checkpoint_dir": self.checkpoint_dir,
            **({"pdb": True} if self.pdb else {}),
            **({"stall_after": self.stall_after} if self.stall_after != DEFAULT_STALL_AFTER_S else {}),
            **({"background": True} if self.background else {}),
            **({"detach": True} if self.detach else {}),
            **({"workdir": self.workdir} if self.workdir is not None else {}),
            **({"pip": list(self.pip)} if self.pip else {}),
            **({"requirements": self.requirements} if self.requirements else {}),
            **({"track": ",".join(self.track)} if self.track else {}),
            **({"profile": "auto" if self.profile == (-1, -1) else f"{self.profile[0]}:{self.profile[1]}"}
               if self.profile is not None else {}),
        }


def _check_debug(options: RunOptions) -> None:
    """The debugging options (docs/user-guide/debugging.md)."""
    if not (_finite_positive(options.stall_after) or options.stall_after == 0) or isinstance(options.stall_after, bool):
        raise OptionsError(f"--stall-after must be a number of seconds >= 0 (e.g. --stall-after 60; 0: never say a "
                           f"run is stalled), got {options.stall_after!r}")
    if not isinstance(options.pdb, bool):
        raise OptionsError(f"--pdb is a switch, got {options.pdb!r}")


def _check_code(options: RunOptions) -> None:
    """The notebook's code on the ranks (docs/user-guide/your-code.md)."""
    if options.workdir is not None and (not isinstance(options.workdir, str) or not options.workdir.strip()):
        raise OptionsError(f"--workdir must be a folder (e.g. --workdir ../project) or none, got {options.workdir!r}")
    if isinstance(options.pip, str) or not all(isinstance(p, str) and p.strip() for p in options.pip):
        raise OptionsError(f"--pip takes one requirement each time, as pip install does (e.g. --pip "
                           f"'scikit-learn>=1.5' --pip dist/mylib-0.1-py3-none-any.whl), got {options.pip!r}")
    if options.requirements is not None and (not isinstance(options.requirements, str)
                                             or not options.requirements.strip()):
        raise OptionsError(f"--requirements must be a requirements file (e.g. --requirements requirements.txt), "
                           f"got {options.requirements!r}")


def _check_background(options: RunOptions) -> None:
    """Background runs and sweeps (docs/user-guide/background-runs.md)."""
    if options.pdb and (options.background or options.sweep):
        raise OptionsError("--pdb opens pdb at the notebook's prompt, which a background run does not hold: run the "
                           "cell without --background (or --sweep) to debug it")
    if options.concurrent is not None and (not _whole(options.concurrent) or options.concurrent < 1):
        raise OptionsError(f"--concurrent must be a whole number of runs >= 1 (e.g. --concurrent 2), "
                           f"got {options.concurrent!r}")
    if options.concurrent is not None and not options.sweep:
        raise OptionsError("--concurrent bounds how many of a sweep's runs train at once: use it with --sweep")
    if options.sweep and options.keep:
        raise OptionsError("--sweep runs the cell on fresh ranks once per combination; kept ranks (--keep) hold one "
                           "namespace: drop one of the two")
    if options.sweep and options.output:
        raise OptionsError("-o/--output stores one run's value; a sweep's values are in its handle (the cell's value: "
                           "`s = _`, then s.results()): drop -o")
    if options.sweep and options.script:
        raise OptionsError("--sweep sets names a cell reads; a script reads its arguments: run %distribute "
                           "--background once per argument list instead")
    _check_detach(options)
    check_search(options)


def _check_detach(options: RunOptions) -> None:
    """Detached runs and sweeps (docs/user-guide/detached-runs.md): background runs by definition, never kept."""
    if not options.detach:
        return
    if not options.background:
        raise OptionsError("--detach runs in the background (its kernel may end): give --background too, or use "
                           "the magic's --detach, which implies it")
    if options.keep:
        raise OptionsError("--detach and --keep: kept ranks live in their kernel (their names are its namespace); "
                           "drop one of the two")


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite_positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


MAGIC_PROG = "%%distribute"
CLI_PROG = "python -m jupyter_torchdist"
_CELL_ONLY = {"output": "-o/--output", "all_ranks": "--all-ranks", "keep": "--keep"}  # about a cell's value or state
_NOTEBOOK_ONLY = {"background": "--background", "detach": "--detach", "sweep": "--sweep",  # a handle's
                  "concurrent": "--concurrent",
                  "trials": "--trials", "search": "--search", "seed": "--seed", "study": "--study"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise OptionsError(f"{self._suggest(message)}\n\n{self.format_usage().strip()}\n"
                           f"See {'%%distribute?' if self.prog == MAGIC_PROG else self.prog + ' --help'} "
                           "for every option.")

    def _suggest(self, message: str) -> str:
        """Add "did you mean" for misspelt flags (argparse lists them after 'unrecognized arguments:')."""
        prefix = "unrecognized arguments: "
        if not message.startswith(prefix):
            return message
        known = [s for action in self._actions for s in action.option_strings]
        words = []
        for token in message[len(prefix):].split():
            close = difflib.get_close_matches(token.split("=", 1)[0], known, n=1) if token.startswith("-") else []
            words.append(f"{token} (did you mean {close[0]}?)" if close else token)
        return prefix + " ".join(words)

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        raise OptionsError(message or self.format_help())


def _positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


_DESCRIPTION = (
    "Run a notebook cell (%%distribute), or a torchrun-style script (%distribute ... script.py ARGS, or "
    "python -m jupyter_torchdist ... script.py ARGS), as N ranks of a distributed PyTorch job: Spark barrier "
    "tasks running DDP by default, local processes with --local. A cell's last expression (or a `return`) "
    "is the value, taken from rank 0."
)


def _build_parser(prog: str) -> _Parser:
    p = _Parser(prog=prog, description=_DESCRIPTION, add_help=False)
    p.add_argument("-n", "--nprocs", dest="n", type=_whole_number, default=None, metavar="N",
                   help="number of ranks (default 2; with --keep, the kept ranks' number)")
    p.add_argument("--gpu", action="store_true",
                   help="one GPU per rank, NCCL backend (default: CPU, gloo)")
    p.add_argument("-o", "--output", metavar="NAME",
                   help="(cells) also store the value in the notebook variable NAME")
    p.add_argument("--timeout", type=_positive_number, metavar="SECONDS",
                   help="stop the run and fail after SECONDS")
    p.add_argument("--local", action="store_true",
                   help="no Spark: N processes on this machine")
    p.add_argument("--threads", dest="backend_threads", type=_whole_number, metavar="T",
                   help="torch CPU threads per rank (default: cores on the host / ranks on the host)")
    p.add_argument("--data-workers", type=_whole_number, metavar="K",
                   help="Spark tasks preparing jupyter_torchdist.batches() data beside the ranks (default: the "
                        "session's task slots beyond the ranks', at least 1)")
    p.add_argument("--wait", type=_positive_number, default=DEFAULT_WAIT_S, metavar="SECONDS",
                   help=f"on a cluster, wait up to SECONDS for enough task slots (executors still starting, cores "
                        f"held by other notebooks) before failing (default {DEFAULT_WAIT_S:g}; 0: fail at once)")
    p.add_argument("--max-payload-mb", type=_positive_number, default=DEFAULT_MAX_PAYLOAD_MB, metavar="MB",
                   help=f"largest captured payload to ship (default {DEFAULT_MAX_PAYLOAD_MB:g})")
    p.add_argument("--max-value-mb", type=_positive_number, default=DEFAULT_MAX_VALUE_MB, metavar="MB",
                   help=f"largest value to bring back (default {DEFAULT_MAX_VALUE_MB:g})")
    p.add_argument("--all-ranks", action="store_true",
                   help="(cells) return a list with every rank's value instead of rank 0's")
    p.add_argument("-q", "--quiet", action="store_true", help="no live view (command line: only the outcome)")
    p.add_argument("--keep", action="store_true",
                   help="(cells) run on kept ranks: started by the first such cell, they keep their state (names "
                        "the cell assigns, the process group) for the next --keep cell; %%distribute_stop ends them")
    _add_code_options(p)
    _add_fault_options(p)
    _add_background_options(p)
    add_track_options(p)
    p.add_argument("script", nargs=argparse.REMAINDER,
                   help="a script and its arguments, run as torchrun would (the line magic and the command line)")
    return p


def _add_code_options(p: _Parser) -> None:
    """The notebook's own code on every rank, wherever it runs."""
    p.add_argument("--workdir", metavar="PATH",
                   help="the folder each rank runs in, sent to every rank's host that does not see it (default: the "
                        "notebook's folder; none: send no folder). Capped at 64 MB; .gitignore is honoured")
    p.add_argument("--pip", action="append", default=None, metavar="SPEC",
                   help="install SPEC (anything pip install takes; a wheel on this machine travels with the run) on "
                        "each rank's host, into a cached overlay of its own; repeatable")
    p.add_argument("--requirements", metavar="FILE",
                   help="install the packages of this requirements file (read here) on each rank's host, as --pip")


def _add_fault_options(p: _Parser) -> None:
    """When things go wrong: restarts after a lost rank, and what a hung or failed rank shows."""
    p.add_argument("--max-restarts", type=_whole_number, default=0, metavar="K",
                   help="start the run again, at most K times, when a rank is lost (its process killed or crashed "
                        "by a signal, its host or executor gone); the cell resumes from its last jt.commit. An "
                        "exception in the cell is never retried (default 0)")
    p.add_argument("--checkpoint-dir", metavar="DIR",
                   help="where jt.commit writes: a folder every rank's host can reach, or an fsspec URL (default, "
                        "ranks on this machine: a folder of the kernel's, removed after the run)")
    p.add_argument("--stall-after", type=_positive_number, default=DEFAULT_STALL_AFTER_S, metavar="SECONDS",
                   help=f"when no rank has made progress and one has waited in a collective for SECONDS, the live "
                        f"view says the run is stalled and shows where each rank is (default "
                        f"{DEFAULT_STALL_AFTER_S:g}; 0: never)")
    p.add_argument("--pdb", action="store_true",
                   help="when a rank raises, open its post-mortem (pdb) in the notebook before the run fails; the "
                        "other ranks are held meanwhile")


def _sweep_space(text: str) -> Space:
    try:
        return parse_space(text)
    except OptionsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_background_options(p: _Parser) -> None:
    """The notebook stays usable while ranks train (a handle to the run comes back at once)."""
    p.add_argument("--background", action="store_true",
                   help="(notebook) return a handle to the run at once (jupyter_torchdist.Run: state, wait(), "
                        "result(), stop()); the live view keeps updating while other cells run")
    p.add_argument("--detach", action="store_true",
                   help="(notebook) like --background, and the run goes on when the kernel restarts, dies or shuts "
                        "down: jupyter_torchdist.attach(ID) or %%distribute_attach ID in any later kernel gives its "
                        "handle, view and value (kept 7 days). On this machine (--local, the embedded default) or a "
                        "Spark Connect session")
    p.add_argument("--sweep", type=_sweep_space, action="append", metavar='"NAME=[V1, V2]; NAME=loguniform(A, B); ..."',
                   help="(notebook) run the cell once per member of this space, each name set as a global, as "
                        "background runs: lists make a grid (every combination); loguniform(A, B), uniform(A, B), "
                        "int(A, B) and choice(X, Y) are drawn --trials times. Given more than once, the names add up "
                        "(each name once). The value is a sweep handle (wait(), results(), best(), stop())")
    p.add_argument("--concurrent", type=_whole_number, metavar="K",
                   help="(with --sweep) at most K of the sweep's runs at once (default: as many as the task slots "
                        "allow; with --local, the cores / ranks)")
    add_search_options(p, _whole_number)


_PARSERS = {prog: _build_parser(prog) for prog in (MAGIC_PROG, CLI_PROG)}


def options_help(prog: str = MAGIC_PROG) -> str:
    """The one help text, under the magic's or the command line's name."""
    return _PARSERS[prog].format_help()


def option_arity(flag: str, prog: str = MAGIC_PROG) -> int | None:
    """How many values option ``flag`` takes (0 for a switch), or None when it is not one of ours."""
    for action in _PARSERS[prog]._actions:
        if flag in action.option_strings:
            return 0 if action.nargs == 0 else 1
    return None


def parse_argv(argv: list[str], prog: str = MAGIC_PROG) -> RunOptions:
    """Parse split arguments into validated options (the command line refuses the cell-only ones)."""
    values = vars(_PARSERS[prog].parse_args(bare_profile(argv)))
    values["sweep"] = merge_spaces(values.get("sweep") or ())  # --sweep given twice: both, never the last alone
    values["script"] = tuple(values.get("script") or ())
    values["pip"] = tuple(values.get("pip") or ())
    values["n_explicit"] = values["n"] is not None
    values["n"] = 2 if values["n"] is None else values["n"]
    if values["track"] is None:
        values["track"] = () if values.get("keep") else default_trackers()  # a default never refuses a kept cell
    if prog == CLI_PROG:
        given = [flag for key, flag in _CELL_ONLY.items() if values.get(key)]
        if given:
            raise OptionsError(f"{', '.join(given)} only mean something for a notebook cell's value; "
                               "a script's ranks return nothing here. Drop them.")
        background = [flag for key, flag in _NOTEBOOK_ONLY.items() if values.get(key) not in (None, False, ())]
        if background:
            raise OptionsError(f"{', '.join(background)} give a notebook a handle to the run; the command line "
                               "waits for its run. Drop them (or run the script from a notebook: %distribute "
                               "--background train.py ARGS).")
        if not values["script"]:
            raise OptionsError(f"no script given: {CLI_PROG} -n 2 train.py ARGS")
    values["background"] = values["background"] or values["detach"]   # a detached run is a background run
    return RunOptions(**values)


def parse_options(line: str) -> RunOptions:
    """Parse a magic's argument line into validated options."""
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        raise OptionsError(f"could not split the arguments: {exc}") from None
    return parse_argv(argv, MAGIC_PROG)
