"""What a rank says to the kernel: its state, progress, log lines, how its cell ended, what it could not send, its
resource use, its ``batches()`` epochs, a restart's commits and a ``--profile`` window.

* ``COMMIT`` (rank 0 -> kernel): ``jupyter_torchdist.commit`` wrote the state a restart resumes from.
* ``PREEMPTED`` (rank -> kernel): this rank's process was told to go (SIGTERM: a spot reclaim, a node drained,
  ``kill``); it exits ``grace_s`` seconds later, and meanwhile the run's ranks may commit (``rank/preemption.py``).
* ``PROFILE`` (rank -> kernel), once per run when the rank's window closes: which steps it profiled, where its step
  time went (``core/profile_summary.py``'s shares: input, compute, communication, other) and its trace, gzipped
  Chrome trace JSON as ``torch.profiler`` wrote it (None when it was too large to send: ``note`` says so). The kernel
  writes the trace under the run's log folder; the summary goes into the view and the report.

A rank's hello is in ``rendezvous.py``, its answers about where it is and its debugger's prompts in ``debug.py``.
"""
from __future__ import annotations

from typing import Any, Final, Literal, TypedDict

from .plan import TLSPin

__all__ = ["STATE", "PROGRESS", "LOG", "RESULT", "FAILED", "DROPPED", "USAGE", "DATA_OPEN", "DATA_DONE", "COMMIT",
           "PROFILE", "PREEMPTED", "Stream", "StateMsg", "ProgressMsg", "LogMsg", "ResultMsg", "FailedMsg",
           "DroppedMsg", "UsageMsg", "DataOpenMsg", "DataDoneMsg", "CommitMsg", "PreemptedMsg", "ProfileMsg",
           "ProfileShares", "AGENT_HELLO", "EXIT", "BEAT", "HEARTBEAT_S", "AgentHelloMsg", "ExitMsg", "BeatMsg"]

STATE: Final = "state"          # starting (group forming) / running (the cell's code started)
PROGRESS: Final = "progress"    # report(), tqdm: step, total, metrics
LOG: Final = "log"              # one line of the rank's stdout or stderr
RESULT: Final = "result"        # the cell ended with a value
FAILED: Final = "failed"        # the cell raised (or a script exited non-zero)
DROPPED: Final = "dropped"      # log lines and progress points the rank could not send (budgets)
USAGE: Final = "usage"          # about once a second: the rank process's CPU, memory, GPU, and time waiting for data
DATA_OPEN: Final = "data_open"  # batches(): this rank wants an epoch of a DataFrame, fed to its data listener
DATA_DONE: Final = "data_done"  # batches(): this rank has stopped reading that epoch (all of it, or it broke off)
COMMIT: Final = "commit"        # rank 0: jt.commit wrote the state a restart resumes from
PREEMPTED: Final = "preempted"  # this rank's process was told to go (SIGTERM): it exits after a grace period
PROFILE: Final = "profile"      # --profile: this rank's window of steps closed

Stream = Literal["stdout", "stderr"]


# (A ``total=False`` subclass adds the fields only some messages of a type carry.)
class StateMsg(TypedDict):
    t: Literal["state"]
    state: Literal["starting", "running"]


class ProgressMsg(TypedDict):
    t: Literal["progress"]
    step: int | None
    total: int | None
    metrics: dict[str, Any]   # the rank's sender makes each value a plain number or a short string
    at: float


class LogMsg(TypedDict):
    t: Literal["log"]
    stream: Stream
    text: str
    at: float


class _Result(TypedDict):
    t: Literal["result"]
    value: bytes | None   # cloudpickle of the value (rank 0, or every rank with --all-ranks)
    repr: str | None
    at: float


class ResultMsg(_Result, total=False):
    cell: int             # kept ranks: which cell this ends
    names: list[str]      # kept ranks: the global names the rank's own code defined (rank 0)


class _Failed(TypedDict):
    t: Literal["failed"]
    summary: str
    traceback: str
    at: float


class FailedMsg(_Failed, total=False):
    code: Any             # a script's exit code (sys.exit's argument)
    interrupted: bool     # the cell ended in KeyboardInterrupt (kept ranks: the kernel asked for it)
    cell: int             # kept ranks: which cell this ends


class DroppedMsg(TypedDict):
    t: Literal["dropped"]
    log_lines: int        # counts since the rank started: a later notice replaces an earlier one
    log_bytes: int
    progress: int


class _Usage(TypedDict):
    t: Literal["usage"]
    at: float
    rss: int | None           # resident memory, bytes


class UsageMsg(_Usage, total=False):
    cpu_pct: float            # CPU use since the last reading (all the process's threads; 100 = one core)
    gpu_util: float | None    # percent, under --gpu when NVML can tell
    gpu_mem: int | None       # bytes the rank holds on its GPU
    wait_s: float             # time spent waiting in batches() this cell (the next three: once batches() ran)
    data_s: float             # time since this cell's first batches() step was asked for
    rows: int                 # rows batches() has handed to the training loop this cell
    collective: str           # the torch.distributed call the main thread is in now (absent: none)
    collective_s: float       # ... and how long it has been in it


class DataOpenMsg(TypedDict):
    t: Literal["data_open"]
    seq: int                  # the rank's n-th batches() epoch in this cell (every rank counts alike)
    feed: int                 # the rank's feed token: data workers address fragments to it
    handle: str               # the DataFrame's handle (data.handles)
    args: dict[str, Any]      # batch_size, columns, shuffle, seed, epoch, drop_last, prefetch
    transform: bytes | None   # cloudpickle of the transform
    transform_name: str
    sources: list[tuple[str, str]]  # (filename, text) of the transform's code, for its tracebacks
    address: tuple[str, int]  # the rank's data listener
    pin: TLSPin | None        # its certificate, with channel TLS


class DataDoneMsg(TypedDict):
    t: Literal["data_done"]
    seq: int
    early: bool               # the loop stopped before the last step (break, an exception)


class CommitMsg(TypedDict):
    t: Literal["commit"]
    step: int
    bytes: int                # the commit's size
    seconds: float            # serialising (on the training thread) and writing (on its own) it took
    at: float


class PreemptedMsg(TypedDict):
    t: Literal["preempted"]
    grace_s: float            # the rank exits this long after the notice (JUPYTER_TORCHDIST_PREEMPT_GRACE_S)
    at: float


class ProfileShares(TypedDict):
    span_s: float      # the window's wall time on this rank
    steps: int         # steps in the window
    input: float       # shares of span_s: waiting for data (a DataLoader's next batch, batches())
    compute: float     # operators and kernels
    comm: float        # collectives nothing else overlapped (all-reduce, broadcast, barrier...)
    other: float       # the rest: Python between operators, sleeps, the optimizer's bookkeeping


class ProfileMsg(TypedDict):
    t: Literal["profile"]
    first: int                   # the first and last step the window held
    last: int
    shares: ProfileShares
    trace: bytes | None          # gzipped Chrome trace JSON (TensorBoard's profiler and Perfetto open it)
    note: str | None             # what cut the window short, or why no trace came


# -- what a rank's agent says ------------------------------------------------------------------------------------------
# What a rank's agent (the watcher that forked it: a Spark task, or a ``--local`` agent) says to the kernel.
#
# * ``BEAT``, every ``HEARTBEAT_S`` while the agent runs: its host and its link are there. A rank whose agent and rank
#   both say nothing for five of them is lost (``kernel.runs.supervisor.SILENCE_S``).
AGENT_HELLO: Final = "agent"    # the agent's host and pid, and its rank's pid
EXIT: Final = "exit"            # how the rank's process ended (code or signal; stopped by us or not)
BEAT: Final = "beat"            # every HEARTBEAT_S: the agent and its link are there
HEARTBEAT_S: Final = 2.0


class AgentHelloMsg(TypedDict):
    t: Literal["agent"]
    host: str
    pid: int
    child: int                # the rank's pid


class ExitMsg(TypedDict):
    t: Literal["exit"]
    code: int | None
    signal: str | None
    stopped: bool             # the agent killed the rank because the kernel said STOP
    at: float


class BeatMsg(TypedDict):
    t: Literal["beat"]
