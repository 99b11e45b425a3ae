"""What travels to every rank (``RunPlan``, with the run's pinned certificate ``TLSPin``) and what a launcher found
when it checked a run could be placed (``LaunchInfo``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, TypedDict

from .code import CodeShip

__all__ = ["TLSPin", "RunPlan", "LaunchInfo", "HELLO", "RENDEZVOUS", "HelloMsg", "RendezvousMsg"]


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
    code: CodeShip | None = None  # the notebook's working directory, modules and packages (rank/code_setup.py)
    inline: tuple[tuple[str, bytes], ...] = ()  # their bytes by digest, for ranks that cannot reach the kernel (the
    #                                             relay of an offline run serves them: LaunchInfo.inline_code)


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
    ui_url: str | None = None           # the backend's own page of the run (the Spark UI), when it has one
    inline_code: bool = False           # the ranks cannot fetch the notebook's code: the plan carries it (inline)


# -- where the ranks meet ----------------------------------------------------------------------------------------------
# Where the ranks meet: each rank's hello (who and where it is, its GPU) and the kernel's answer (where the store is,
# the rank's place on its node, the GPUs it sees), planned by ``core/rendezvous.py`` once every rank has said hello.
HELLO: Final = "hello"            # rank -> kernel: who I am; rank 0 adds where its TCPStore listens
RENDEZVOUS: Final = "rendezvous"  # kernel -> rank: where the store is, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GPUs


class _Hello(TypedDict):
    t: Literal["hello"]
    host: str
    ip: str               # the address the rank's own listeners use
    pid: int


class HelloMsg(_Hello, total=False):
    store_port: int       # rank 0 only
    gpu: str              # --gpu: the rank's own GPU (a CUDA_VISIBLE_DEVICES entry)
    scope: str            # --gpu: which GPUs it can open (gpus.device_scope)
    node: int             # TorchDistributor's layout: the node (Spark task) it belongs to (rendezvous.py)


class RendezvousMsg(TypedDict):
    t: Literal["rendezvous"]
    master_addr: str
    master_port: int
    local_rank: int
    local_world_size: int
    group_rank: int
    num_hosts: int
    gpus: list[str]       # --gpu: its CUDA_VISIBLE_DEVICES (LOCAL_RANK indexes its own); else empty
    host_ranks: int       # the run's ranks on its host (more than its node's under TorchDistributor's layout)
