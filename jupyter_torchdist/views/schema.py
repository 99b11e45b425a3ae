"""The run snapshot: the one picture of a run that every view draws (live widget, text, saved report).

``kernel.state.RunState.snapshot()`` makes it; ``labextension/src/types.ts`` mirrors it for the
front end (a test checks the two name the same fields). Views treat every field as untrusted and
possibly missing: a report saved by another version, or edited by hand, must still render.
"""
from __future__ import annotations

from typing import Any, Final, TypedDict

from ..core.brief import TextGroup as GroupSnapshot  # ranks that say the same thing: summary, ranks, sample

__all__ = ["SCHEMA_VERSION", "LOSS_KEYS", "RankSnapshot", "RunSnapshot", "RunErrorSnapshot",
           "SecondarySnapshot", "UsageSnapshot", "DataSnapshot", "FrameSnapshot", "PlaceSnapshot",
           "SweepRunSnapshot", "SweepSnapshot", "QuantileSnapshot", "HostGroupSnapshot", "OutlierSnapshot",
           "GroupSnapshot", "SummarySnapshot", "TableSnapshot", "MANY_RANKS", "TABLE_COLUMNS", "ProfileSnapshot",
           "ProfileRankSnapshot"]

SCHEMA_VERSION: Final = 1
LOSS_KEYS: Final = ("loss", "train_loss", "training_loss")  # metrics drawn as the loss curve, first found
MANY_RANKS: Final = 64  # above this many ranks a run is drawn as a summary, its outliers and a paged table
TABLE_COLUMNS: Final = ("rank", "host", "state", "step", "rate", "loss")


class UsageSnapshot(TypedDict):
    """Where a rank's time goes (sampled about once a second by the rank)."""
    cpu_pct: float | None       # the rank process (all its threads), percent of one core
    rss: int | None             # resident memory, bytes
    gpu_util: float | None      # its GPU's utilisation, percent (--gpu, when NVML can tell)
    gpu_mem: int | None         # bytes it holds on its GPU
    input_wait: float | None    # share of its time spent waiting in batches() (0..1); None without batches()
    rows: int                   # rows batches() handed to its training loop
    rows_per_s: float | None


class DataSnapshot(TypedDict):
    """The data job feeding batches() (None when the run reads no DataFrame)."""
    workers: int                # data workers (Spark tasks at a time) of the latest epoch
    active: int                 # ... still making batches
    running: int                # ... with a Spark task running at this moment
    rows: int                   # rows the ranks have taken
    rows_per_s: float | None    # ... per second, all ranks together, lately
    seconds: float | None       # since the first batch was asked for


class FrameSnapshot(TypedDict):
    """One line of a rank's stack, outermost first (``contract.FrameInfo``)."""
    where: str              # "cell line 4", "train.py line 12"
    name: str               # the function
    code: str               # its source line
    call: str               # what it is calling now ("dist.all_reduce"), when known
    library: int            # 0: the user's code; n > 0: n library frames folded into this line


class PlaceSnapshot(TypedDict):
    """Where a rank is: its stack when last asked (the Stacks control, a stall, a stop)."""
    summary: str            # "waiting in all_reduce at cell line 4 for 15.2 s"
    frames: list[FrameSnapshot]
    age_s: float | None     # how long ago the stack was taken (None: it never answered)


class RankSnapshot(TypedDict):
    """One rank's row."""
    rank: int
    host: str
    state: str              # pending, starting, running, done, failed, stopped
    step: int | None
    total: int | None
    rate: float | None      # steps per second, smoothed
    metrics: dict[str, Any]
    last_line: str
    elapsed_s: float | None
    exit_code: int | None
    exit_signal: str | None
    error: str | None
    log_lines: int          # every line the rank printed
    log_dropped: int        # lines the rank could not send (past its log budget)
    log_tail: list[list[str]]        # [stream, text] pairs, the newest last
    loss_history: list[list[float]]  # [step, loss] pairs
    usage: UsageSnapshot | None
    place: PlaceSnapshot | None     # where it is (once asked)
    paused: str | None              # "pdb" or "post-mortem" while its debugger waits for the user


class QuantileSnapshot(TypedDict):
    """One measure over the ranks that report it, as Spark's stage summary shows a task metric."""
    name: str               # "step", "rate", "loss", "cpu_pct", "rss", "input_wait" or a reported metric
    q: list[float]          # min, 25th percentile, median, 75th percentile, max
    n: int                  # ranks that report it


class HostGroupSnapshot(TypedDict):
    """The ranks of one host."""
    host: str
    ranks: int
    counts: dict[str, int]  # by state
    step: float | None      # the median step of its ranks
    rate: float | None      # their median rate


class OutlierSnapshot(TypedDict):
    """A rank worth a look, and why."""
    rank: int
    host: str
    why: str                # failed, paused, stalled, behind, slowest, waiting on input
    detail: str             # "step 41 of 100, the median is 57", the failure's summary


class SummarySnapshot(TypedDict):
    """A many-rank run at a glance (runs of more than ``MANY_RANKS`` ranks)."""
    counts: dict[str, int]          # ranks by state
    quantiles: list[QuantileSnapshot]
    loss_band: list[list[float]]    # [median step, min, median, max] of the ranks' latest loss, over the run
    hosts: list[HostGroupSnapshot]
    outliers: list[OutlierSnapshot]
    places: list[GroupSnapshot]     # where the ranks are, by place, once stacks were taken


class TableSnapshot(TypedDict):
    """Every rank in a few columns, for paging, searching and sorting without the kernel."""
    columns: list[str]      # TABLE_COLUMNS
    hosts: list[str]        # the "host" column is an index into this
    states: list[str]       # the "state" column is an index into this
    rows: list[list[Any]]   # [rank, host index, state index, step, rate, loss], by rank


class SecondarySnapshot(TypedDict):
    """A failure of another rank, shown below the root cause."""
    rank: int | None
    host: str
    summary: str


class RunErrorSnapshot(TypedDict):
    """The root cause of a failed run."""
    rank: int | None
    host: str
    kind: str               # exception, exit, lost, launch
    summary: str
    traceback: str
    secondary: list[SecondarySnapshot]
    echoes: list[GroupSnapshot]     # the other ranks' failures grouped by what they say, most ranks first


class ProfileRankSnapshot(TypedDict):
    """One rank's --profile window: where its step time went (shares of the window, 0..1)."""
    rank: int
    first: int | None       # the window's first and last step
    last: int | None
    steps: int
    step_s: float | None    # the window's wall time over its steps
    input: float            # waiting for data
    compute: float          # operators, GPU kernels and copies
    comm: float             # collectives nothing else overlapped
    other: float
    trace: str | None       # its trace file (gzipped Chrome trace JSON: TensorBoard's profiler, Perfetto)
    note: str | None        # what cut the window short, or why there is no trace


class ProfileSnapshot(TypedDict):
    """A --profile run's summary: a row per rank that sent its window, and the slowest rank and why."""
    folder: str | None      # where the traces are
    ranks: list[ProfileRankSnapshot]
    verdict: str | None     # "rank 1 is the slowest: 62% of its step time waiting for input; ..."


class RunSnapshot(TypedDict):
    """The whole run."""
    version: int
    title: str
    status: str             # queued, starting, running, stopping, succeeded, failed, timeout, interrupted
    headline: str
    backend: str
    options: dict[str, Any]
    world_size: int
    elapsed_s: float | None
    value_repr: str | None
    error: RunErrorSnapshot | None
    notices: list[str]      # things the user should know that are not failures ("log lines dropped")
    data: DataSnapshot | None
    ranks: list[RankSnapshot]
    stall: str | None       # no rank moves and one waits in a collective: what the view says (the run goes on)
    run_id: int | None      # the kernel's number for the run (jupyter_torchdist.runs())
    id: str | None          # the run's durable id (run.id): the runs panel, the command line and attach name it
    background: bool        # the notebook went on while it ran: its Stop stops this run only
    summary: SummarySnapshot | None  # runs of more than MANY_RANKS ranks: ``ranks`` then holds only the
    table: TableSnapshot | None      # failed, outlier and asked-for ranks, and ``table`` every rank
    profile: ProfileSnapshot | None  # --profile: where each rank's step time went (None: not profiled yet)


class SweepRunSnapshot(TypedDict):
    """One run of a sweep, as the comparison view's row shows it (rank 0's progress and metrics)."""
    id: int
    params: dict[str, Any]  # the combination (JSON values; anything else by its repr)
    label: str              # "lr=0.1, batch=32"
    state: str              # queued, running, done, failed, stopped, or stopped_early (by the sweep's
                            # early-stopping rule: an expected outcome, not a failure)
    step: int | None
    total: int | None
    rate: float | None
    metrics: dict[str, Any]
    elapsed_s: float | None
    loss: list[list[float]]  # [step, loss] pairs, thinned to at most a few hundred
    value_repr: str | None
    error: str | None       # a failed or stopped run: why
    stopped_early_at: int | None  # a member stopped early: the step its rule stopped it at
    why: str | None         # ... and the rule's reason, a sentence ("loss 0.91 is in the worst half at step 9")
    steps: int | None       # the highest step it reported
    metric_best: float | None  # the sweep's metric (SweepSnapshot.metric): its best value by the sweep's mode ...
    metric_last: float | None  # ... and its latest
    past: bool              # a member from an earlier kernel of a resumed study: no live run (``id`` is then its
                            # member number, never negative)


class SweepSnapshot(TypedDict):
    """A whole sweep: its comparison view and its saved report."""
    version: int
    title: str
    names: list[str]        # the names the sweep sets, in order
    status: str             # running, then succeeded, failed (some run failed) or stopped
    elapsed_s: float
    concurrent: int | None  # runs at once (None: not yet known)
    counts: dict[str, int]  # runs by state (stopped_early among them)
    runs: list[SweepRunSnapshot]
    metric: str             # what the sweep judges its members by ("loss")
    mode: str               # "min" or "max": which way is better
    search: str             # how members are picked: "grid", "random" or "optuna"
    early_stop: str         # the rule that stops members early: "asha", "median" or "none"
    trials: int             # members planned in all (runs holds those picked so far)
    best_id: int | None     # the row id of the best finished member (None: none finished yet)
    scales: dict[str, str]  # per parameter name: "log", "linear" or "category" (how its effect is plotted)
    best_so_far: list[list[float]]  # [k, best metric among the first k members to finish], k = 1, 2, ...
