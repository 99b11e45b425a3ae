"""What passes between the kernel, the launchers and the ranks: the one contract, typed, in one place.

Three kinds of process take part in a run:

* the **kernel** (the notebook's process) plans the run, listens on the channel and draws the view;
* an **agent** per rank (a Spark task, or a ``--local`` server's process) forks, watches and reports on it;
* the **rank** runs the user's code.

Every message is a dict whose ``"t"`` names its type (the constants below are the whole vocabulary); the
``TypedDict`` beside each says its fields, its ``t`` a ``Literal`` of that constant. Producers build messages
as their ``TypedDict`` (mypy checks every field), consumers narrow the unions below on ``msg["t"]``. The unions
say who sends what: ``RankMessage``, ``AgentMessage``, ``ChannelNotice`` and ``BackendMessage`` make up
``InboundMessage`` (what the kernel receives), ``ToRank`` and ``ToAgent`` what it sends. ``RANK_SENDS``,
``INBOUND`` and the other sets are derived from the unions, so the channel's check of who may send what and
the kernel's dispatch (exhaustive over the unions: ``unhandled`` makes mypy fail on a type left out) cannot
drift apart. On the wire a message is a plain dict (pickled); the channel stamps what a connection sends
with its ``"rank"``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NoReturn, TypedDict, Union, get_args, get_type_hints

from .contract_faults import BEAT, COMMIT, HEARTBEAT_S, BeatMsg, CommitMsg  # lost hosts, restarts
from .contract_debug import (PDB, PDB_REPLY, PLACE, WHERE, WHERE_WANTED, FrameInfo, PdbKind, PdbMsg,  # stacks, pdb
                             PdbReplyMsg, PlaceMsg, WhereMsg, WhereWantedMsg)
from .contract_profile import PROFILE, ProfileMsg, ProfileShares  # --profile's window, per rank
from .contract_runs import FOCUS_WANTED, STOP_WANTED, FocusWantedMsg, StopWantedMsg  # runs held, their views
from .contract_rendezvous import HelloMsg, RendezvousMsg  # a rank's hello, the kernel's answer: where ranks meet

__all__ = [
    "RANK", "AGENT", "BACKEND", "Role", "HELLO", "STATE", "PROGRESS", "LOG", "RESULT", "FAILED", "DROPPED", "USAGE",
    "DATA_OPEN", "DATA_DONE", "COMMIT", "AGENT_HELLO", "EXIT", "BEAT", "CONNECTED", "DISCONNECTED", "LOST", "STOPPED",
    "JOB_END", "DATA_STATUS", "RENDEZVOUS", "RELEASE", "CELL", "STOP", "INTERRUPT", "DATA_PLAN", "DATA_ERROR",
    "HelloMsg", "StateMsg", "ProgressMsg", "LogMsg", "ResultMsg", "FailedMsg", "DroppedMsg", "UsageMsg", "DataOpenMsg",
    "DataDoneMsg", "CommitMsg", "AgentHelloMsg", "ExitMsg", "BeatMsg", "ConnectedMsg", "DisconnectedMsg", "LostMsg",
    "StoppedMsg", "JobEndMsg", "DataStatusMsg", "RendezvousMsg", "ReleaseMsg", "CellMsg", "DataPlanMsg", "DataErrorMsg",
    "StopMsg", "InterruptMsg", "Stream", "RankMessage", "FinalMessage", "AgentMessage", "ChannelNotice",
    "BackendMessage", "InboundMessage", "DataReply", "ToRank", "ToAgent", "OutboundMessage", "unhandled", "RANK_SENDS",
    "AGENT_SENDS", "CHANNEL_SAYS", "BACKEND_SAYS", "INBOUND", "SENDS", "TLSPin", "RunPlan", "LaunchInfo", "Inbound",
    "HEARTBEAT_S", "PROFILE", "ProfileMsg", "ProfileShares",
    "PLACE", "PDB", "WHERE", "PDB_REPLY", "WHERE_WANTED", "FrameInfo", "PlaceMsg", "PdbMsg", "WhereMsg", "PdbReplyMsg",
    "WhereWantedMsg", "PdbKind", "STOP_WANTED", "StopWantedMsg", "FOCUS_WANTED", "FocusWantedMsg",
]

# -- roles: who a message comes from ------------------------------------------------------------------
RANK: Final = "rank"        # the process running the user's code
AGENT: Final = "agent"      # the watcher that forked it (a Spark task, or a --local agent)
BACKEND: Final = "backend"  # the kernel's own launcher or channel, speaking for a rank it lost
Role = Literal["rank", "agent", "backend"]

# -- rank -> kernel ------------------------------------------------------------------------------------
HELLO: Final = "hello"          # who I am; rank 0 adds where its TCPStore listens
STATE: Final = "state"          # starting (group forming) / running (the cell's code started)
PROGRESS: Final = "progress"    # report(), tqdm: step, total, metrics
LOG: Final = "log"              # one line of the rank's stdout or stderr
RESULT: Final = "result"        # the cell ended with a value
FAILED: Final = "failed"        # the cell raised (or a script exited non-zero)
DROPPED: Final = "dropped"      # log lines and progress points the rank could not send (budgets)
USAGE: Final = "usage"          # about once a second: the rank process's CPU, memory, GPU, and time waiting for data
DATA_OPEN: Final = "data_open"  # batches(): this rank wants an epoch of a DataFrame, fed to its data listener
DATA_DONE: Final = "data_done"  # batches(): this rank has stopped reading that epoch (all of it, or it broke off)

# -- agent -> kernel -----------------------------------------------------------------------------------
AGENT_HELLO: Final = "agent"    # the agent's host and pid, and its rank's pid
EXIT: Final = "exit"            # how the rank's process ended (code or signal; stopped by us or not)

# -- said by the kernel's channel, about a connection --------------------------------------------------
CONNECTED: Final = "connected"
DISCONNECTED: Final = "disconnected"

# -- said by the kernel's launcher or channel, about a rank it lost -------------------------------------
LOST: Final = "lost"            # the agent or executor vanished before saying how the rank ended
STOPPED: Final = "stopped"      # the rank was stopped by the kernel and is gone
JOB_END: Final = "job_end"      # the launcher's job ended (rank -1)
DATA_STATUS: Final = "data_status"  # the data service's workers: how many run, rows made (rank -1)

# -- kernel -> rank / agent ----------------------------------------------------------------------------
RENDEZVOUS: Final = "rendezvous"  # where the store is, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, the GPUs seen
RELEASE: Final = "release"        # rank: every rank has ended its cell; you may exit now
CELL: Final = "cell"              # kept rank: run this payload next, in your namespace
DATA_PLAN: Final = "data_plan"    # rank: your epoch is planned (steps); data workers are on their way
DATA_ERROR: Final = "data_error"  # rank: the data for that epoch cannot come (the transform raised, ...)
STOP: Final = "stop"              # agent: kill your rank now
INTERRUPT: Final = "interrupt"    # agent: deliver SIGINT to your rank (kept ranks survive it)

Stream = Literal["stdout", "stderr"]


# -- message shapes: rank -> kernel ----------------------------------------------------------------------
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


# -- agent -> kernel ---------------------------------------------------------------------------------------
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


# -- the kernel's channel and launchers --------------------------------------------------------------------
class ConnectedMsg(TypedDict):
    t: Literal["connected"]


class DisconnectedMsg(TypedDict):
    t: Literal["disconnected"]


class _Lost(TypedDict):
    t: Literal["lost"]
    summary: str


class LostMsg(_Lost, total=False):
    traceback: str
    at: float


class StoppedMsg(TypedDict):
    t: Literal["stopped"]


class _JobEnd(TypedDict):
    t: Literal["job_end"]
    error: str | None


class JobEndMsg(_JobEnd, total=False):
    notice: str           # what the launcher wants the user to know about the run (shown with the state's notes)


class DataStatusMsg(TypedDict):
    t: Literal["data_status"]
    workers: int              # data workers (lanes) of the epoch
    active: int               # ... that still have pieces to make
    running: int              # ... with a Spark task running at this moment
    rows: int                 # rows the data workers have sent this cell


# -- kernel -> rank ----------------------------------------------------------------------------------------
class ReleaseMsg(TypedDict):
    t: Literal["release"]


class _Cell(TypedDict):
    t: Literal["cell"]
    cell: int             # kept ranks count their cells from 1 (the payload that started them)
    payload: bytes        # cloudpickle of a rank.kept.KeptCell or KeptCall
    filename: str
    source: str
    all_ranks: bool
    max_value_bytes: int


class CellMsg(_Cell, total=False):
    post_mortem: bool     # --pdb: a failing rank offers the kernel its post-mortem


class DataPlanMsg(TypedDict):
    t: Literal["data_plan"]
    seq: int
    steps: int                # batches every rank gets this epoch (from where it resumes, on a restart)
    rows: int                 # rows used this epoch (all ranks)
    left_out: int
    workers: int
    lanes: int                # the plan's data workers: a restart resumes the epoch with the same plan


class DataErrorMsg(TypedDict):
    t: Literal["data_error"]
    seq: int
    summary: str
    traceback: str


# -- kernel -> agent ---------------------------------------------------------------------------------------
class StopMsg(TypedDict):
    t: Literal["stop"]
    reason: str


class InterruptMsg(TypedDict):
    t: Literal["interrupt"]


# -- who sends what ----------------------------------------------------------------------------------------
RankMessage = Union[HelloMsg, StateMsg, ProgressMsg, LogMsg, ResultMsg, FailedMsg, DroppedMsg, UsageMsg,
                    DataOpenMsg, DataDoneMsg, CommitMsg, PlaceMsg, PdbMsg, ProfileMsg]
FinalMessage = Union[ResultMsg, FailedMsg]  # how a rank's cell ended
AgentMessage = Union[AgentHelloMsg, ExitMsg, BeatMsg]
ChannelNotice = Union[ConnectedMsg, DisconnectedMsg]        # said for a rank's and an agent's connection alike
BackendMessage = Union[LostMsg, StoppedMsg, JobEndMsg, DataStatusMsg, WhereWantedMsg, StopWantedMsg, FocusWantedMsg]
InboundMessage = Union[RankMessage, AgentMessage, ChannelNotice, BackendMessage]
DataReply = Union[DataPlanMsg, DataErrorMsg]                # what answers a rank's DATA_OPEN
ToRank = Union[RendezvousMsg, ReleaseMsg, CellMsg, DataReply, WhereMsg, PdbReplyMsg]
ToAgent = Union[StopMsg, InterruptMsg]
OutboundMessage = Union[ToRank, ToAgent]


def unhandled(msg: NoReturn) -> None:
    """The last ``else`` of a dispatch on ``msg["t"]``: mypy fails unless every type of the union was
    handled above it (what is left is then nothing). At run time it does nothing: the message is ignored."""


def _kinds(union: Any) -> frozenset[str]:
    """The ``"t"`` values of a union of message types, read from their ``Literal`` annotations."""
    return frozenset(t for cls in get_args(union) for t in get_args(get_type_hints(cls)["t"]))


# -- what travels to every rank --------------------------------------------------------------------------
@dataclass(frozen=True)
class TLSPin:
    """What a rank needs to trust the kernel: the run's certificate (PEM) and its SHA-256 fingerprint."""
    cert_pem: str
    sha256: str


@dataclass(frozen=True)
class RunPlan:
    """Everything every rank needs, identical for all ranks (the rank number comes separately)."""
    run_id: str
    world_size: int
    address: tuple[str, int]
    secret: bytes
    payload: bytes
    filename: str
    source: str
    gpu: bool
    threads: int | None
    max_value_bytes: int
    all_ranks: bool
    loopback: bool  # every rank is on the kernel's host: keep all traffic on 127.0.0.1
    pg_timeout_s: float = 1800.0
    tls: TLSPin | None = None  # the run's pinned certificate when the channel runs over TLS
    keep: bool = False         # kept ranks: after the payload, wait for CELL messages instead of exiting
    probe_s: float | None = None  # the tasks first check they reach the channel (this long) and agree on a mode
    offline: bool = False      # the tasks cannot reach the kernel: rank 0's task relays (launchers/relay.py)
    versions: tuple[tuple[str, str], ...] = ()  # the kernel's Python and packages a rank's must match (_versions)
    checkpoint: str | None = None  # where jt.commit writes and jt.restore reads (--max-restarts, --checkpoint-dir)
    attempt: int = 1               # which start of the run this is (--max-restarts)
    post_mortem: bool = False  # --pdb: a failing rank offers the kernel its post-mortem before it reports
    argv: tuple[str, ...] = ()  # the kernel's sys.argv: a rank's code sees the notebook's, on every backend
    every_point: bool = False   # --track: rank 0 sends every report() (the full history), not a thinned few;
    profile: tuple[int, int] | None = None  # --profile: the window of steps (AUTO_WINDOW: a few after the first)
    per_node: int = 0  # pyspark's TorchDistributor layout: each run of this many ranks (a Spark task's) is a node


@dataclass(frozen=True)
class LaunchInfo:
    """What a launcher found when it checked the run could be placed."""
    label: str            # shown in the view, e.g. "spark local[4]"
    channel_host: str     # where the kernel listens so that ranks can reach it
    loopback: bool        # every rank runs on this host
    channel_tls: bool = False           # the live channel runs over TLS (channel/tls.py)
    warnings: tuple[str, ...] = ()      # said once before the run starts (e.g. Spark encrypts, we do not)
    watcher: str = "the agent process"  # what runs beside each rank, in words ("the Spark task")
    lost_hint: str = ""                 # where to look when a watcher is lost ("The executor's log says why.")
    advertise: tuple[str, int | None] | None = None  # where ranks dial if not where it listens (NAT; None: same port)
    start_bound_s: float | None = None  # ranks start one by one (dynamic allocation): each checks in by then or stop
    start_hint: str = ""                # why ranks may not start in time there, and what to do
    ranks_per_task: int = 1             # the ranks one task runs (a rank per GPU of a task that holds several)


@dataclass(frozen=True)
class Inbound:
    """One message for the kernel, stamped with the rank and role its connection authenticated as."""
    rank: int
    role: Role
    msg: InboundMessage
    at: float = field(default_factory=time.time)


# -- derived from the unions: who may send what (the channel drops anything else) --------------------------
RANK_SENDS: Final = _kinds(RankMessage)
AGENT_SENDS: Final = _kinds(AgentMessage)
CHANNEL_SAYS: Final = _kinds(ChannelNotice)
BACKEND_SAYS: Final = _kinds(BackendMessage)
SENDS: Final[dict[str, frozenset[str]]] = {RANK: RANK_SENDS, AGENT: AGENT_SENDS}  # over a connection

# Every (role, type) the kernel can receive. Channel notices come for both connection roles.
INBOUND: Final = frozenset({(RANK, t) for t in RANK_SENDS | CHANNEL_SAYS} | {(BACKEND, t) for t in BACKEND_SAYS}
                           | {(AGENT, t) for t in AGENT_SENDS | CHANNEL_SAYS})
