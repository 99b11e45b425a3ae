"""init/shutdown, the rank layout, Horovod's build queries, and process sets (each with its own group and channel).
"""
from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import PrefixStore
from torch.distributed.rendezvous import rendezvous

from .errors import (
    UNSUPPORTED,
    HorovodInternalError,
    HorovodLaunchError,
    HorovodNotInitializedError,
    HorovodUnsupportedError,
)
from .negotiation import Channel

__all__ = ["ProcessSet", "global_process_set", "add_process_set", "remove_process_set", "setup", "teardown",
           "resolve", "global_channel", "init", "shutdown", "is_initialized", "size", "rank", "local_size",
           "local_rank", "cross_size", "cross_rank", "is_homogeneous", "mpi_threads_supported", "mpi_enabled",
           "mpi_built", "gloo_enabled", "gloo_built", "nccl_built", "ddl_built", "ccl_built", "cuda_built",
           "rocm_built", "check_initialized", "control_device", "join_protocol", "JOIN_ENV"]


# -- process_sets -----------------------------------------------------------------------------------------------------
# Process sets: Horovod's subsets of ranks that run collectives together, each a torch.distributed group.
#
# ``add_process_set(ranks)`` is what ``torch.distributed.new_group(ranks)`` is, and like it (and like Horovod's) it is
# called by every rank, in the same order. Each set has its own negotiation (``negotiation``) on its own group, so the
# sets' collectives never wait for each other. A rank outside a set that calls a collective on it gets Horovod's
# error (a ``HorovodInternalError`` saying it is not a member); the set's rank and size are relative to the set, and
# root ranks stay global ranks, as in Horovod.

class ProcessSet:
    """A set of ranks (sorted) that run collectives together; pass it as ``process_set=`` to any collective.

    ``process_set_id`` is None until the set is registered (``hvd.add_process_set`` or ``hvd.init(process_sets=)``).
    """

    process_set_id: int | None = None
    mpi_comm: Any = None

    def __init__(self, ranks_or_comm: Iterable[int]) -> None:
        if isinstance(ranks_or_comm, (str, bytes)) or not isinstance(ranks_or_comm, Iterable):
            raise HorovodUnsupportedError("ProcessSet takes a list of ranks here: MPI communicators need MPI, "
                                          "which is not used (mpi_built() is False).")
        ranks = list(ranks_or_comm)
        if any(not isinstance(r, int) or isinstance(r, bool) for r in ranks):
            raise ValueError("ProcessSet should be initialized with a list of process ranks")
        self.ranks: list[int] | None = sorted(ranks)
        self._channel: Channel | None = None

    def size(self) -> int | None:
        """The number of ranks in the set, or None if it is not registered."""
        if self.process_set_id is None or self.ranks is None:
            return None
        return len(self.ranks)

    def rank(self) -> int | None:
        """This rank's index within the set (None if not registered); a rank outside it gets a ValueError."""
        if self.process_set_id is None or self.ranks is None:
            return None
        if dist.get_rank() not in self.ranks:
            raise ValueError("Process is not part of provided process set.")
        return self.ranks.index(dist.get_rank())

    def included(self) -> bool | None:
        """Whether this rank belongs to the set (None before it is registered)."""
        if self.ranks is None:
            return None
        return dist.is_initialized() and dist.get_rank() in self.ranks

    def _invalidate(self) -> None:
        self.process_set_id, self._channel = None, None

    def __repr__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, mpi_comm=None)"


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


class _Registry:
    sets: dict[int, ProcessSet] = {}
    groups: dict[int, tuple[Any, ...]] = {}  # the torch groups a set created (destroyed with it)
    next_id = 1
    inits = 0  # init() calls in this process: the same count on every rank
    device = torch.device("cpu")
    negotiate = True


def _channel(group: Any, ranks: list[int], process_set: ProcessSet) -> Channel:
    """The set's negotiation; its gradient groups' rendezvous keys live under a prefix no other init or set uses."""
    channel = Channel(group, ranks, ranks.index(dist.get_rank()), _Registry.device, _Registry.negotiate)
    channel.process_set = process_set
    channel.prefix = f"jupyter_torchdist.horovod/{_Registry.inits}/{process_set.process_set_id}"
    return channel


def setup(device: torch.device, negotiate: bool) -> None:
    """At ``init()``: the global set is every rank, on the default group."""
    world = dist.get_world_size()
    _Registry.sets, _Registry.groups, _Registry.next_id = {0: global_process_set}, {}, 1
    _Registry.device, _Registry.negotiate = device, negotiate
    global_process_set.ranks = list(range(world))
    _Registry.inits += 1
    global_process_set._channel = _channel(None, list(range(world)), global_process_set)


def teardown(reason: str, destroy_groups: bool) -> None:
    """At ``shutdown()``: every set forgotten (their pending collectives fail with ``reason``); the groups created
    for them destroyed when the default group stays up (a launcher's: destroying it takes them all otherwise)."""
    for set_id, process_set in list(_Registry.sets.items()):
        if process_set._channel is not None:
            process_set._channel.close(reason)
            for group in _Registry.groups.get(set_id, ()) if destroy_groups else ():
                dist.destroy_process_group(group)
        if process_set is not global_process_set:
            process_set._invalidate()
    _Registry.sets, _Registry.groups = {}, {}
    global_process_set._channel = None


def _check_registry() -> None:
    if global_process_set._channel is None or not dist.is_initialized():
        raise HorovodNotInitializedError("Horovod has not been initialized; use hvd.init().")


def add_process_set(process_set: ProcessSet | Iterable[int]) -> ProcessSet:
    """Register a set of ranks (every rank calls this, in the same order, as ``torch.distributed.new_group``)."""
    _check_registry()
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    ranks = process_set.ranks or []
    world = dist.get_world_size()
    if not ranks or any(not 0 <= r < world for r in ranks) or len(set(ranks)) != len(ranks):
        raise ValueError(f"a process set takes distinct ranks between 0 and {world - 1}, got {ranks}")
    if any(other.ranks == ranks for other in _Registry.sets.values()):
        raise ValueError(f"Attempted to add a duplicate process set: {process_set} (a set with ranks {ranks} is "
                         "already registered)")
    group = dist.new_group(ranks)
    process_set.process_set_id = _Registry.next_id
    _Registry.next_id += 1
    _Registry.sets[process_set.process_set_id] = process_set
    _Registry.groups[process_set.process_set_id] = (group,)
    if dist.get_rank() in ranks:
        process_set._channel = _channel(group, ranks, process_set)
    return process_set


def remove_process_set(process_set: ProcessSet) -> bool:
    """Forget a registered set (every rank calls this); False for the global set or one not registered."""
    _check_registry()
    set_id = process_set.process_set_id
    if not set_id or _Registry.sets.get(set_id) is not process_set:
        return False
    del _Registry.sets[set_id]
    groups = _Registry.groups.pop(set_id)
    if process_set._channel is not None:
        process_set._channel.close(f"hvd.remove_process_set({process_set}) before this collective ran")
        for group in groups:
            dist.destroy_process_group(group)
    process_set._invalidate()
    return True


def resolve(process_set: Any, what: str) -> Channel:
    """The negotiation channel for a collective named ``what`` on ``process_set`` (None: the global set)."""
    _check_registry()
    if process_set is None:
        process_set = global_process_set
    if not isinstance(process_set, ProcessSet):
        raise TypeError(f"process_set must be a hvd.ProcessSet (from hvd.add_process_set), got "
                        f"{type(process_set).__name__}")
    if process_set.process_set_id is None or _Registry.sets.get(process_set.process_set_id) is not process_set:
        raise HorovodInternalError(f"{what}: process set provided does not exist, or has not been registered "
                                   f"({process_set}); register it with hvd.add_process_set on every rank.")
    if process_set._channel is None:
        raise HorovodInternalError(f"{what}: rank {dist.get_rank()} is not a member of the provided process set "
                                   f"({process_set}).")
    return process_set._channel


def global_channel() -> Channel:
    return resolve(None, "hvd")


# -- basics -----------------------------------------------------------------------------------------------------------
# init/shutdown, the rank layout, and the honest answers to Horovod's build queries.
#
# The process group is torch.distributed's default group. ``init()`` adopts one that is already up (our
# launchers, torchrun scripts that called ``init_process_group``) and otherwise creates it from the torchrun-style
# environment. Only a group created here is ever destroyed here: the launchers own theirs, and a Python-side
# destroy of someone else's gloo group can deadlock in its teardown.
#
# ``init()`` after ``shutdown()`` (Horovod allows it) creates a new group whose rendezvous keys live under a prefix of
# their own (``init.1/``, ``init.2/``...) in a store kept across inits: the env:// store outlives a destroyed group
# (torchrun's agent store always does), and a rank that re-initialises first must not find the previous group's
# addresses there, whose sockets are closed ("Gloo connectFullMesh failed ... Connection refused").

_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
JOIN_ENV = "JUPYTER_TORCHDIST_HOROVOD_JOIN"  # "0": no control rounds, hence no join() (DDP's exact traffic)


@dataclass
class _State:
    initialized: bool = False
    owns_group: bool = False
    local_rank: int = 0
    local_size: int = 1
    cross_rank: int = 0
    cross_size: int = 1
    cpu_group: bool = True  # the default group takes CPU tensors (gloo in it), so control rounds go on CPU
    join_protocol: bool = True  # collectives are negotiated first (see the negotiation), so join() works
    store: Any = None  # the env:// rendezvous store, kept across init/shutdown (see the module docstring)
    store_env: tuple[str, ...] = ()
    generation: int = 0


_state = _State()


def check_initialized() -> None:
    """Horovod's error for any call before ``init()``; also catches a group destroyed behind our back."""
    if not _state.initialized or not dist.is_initialized():
        raise HorovodNotInitializedError("Horovod has not been initialized; use hvd.init().")


def _create_group() -> None:
    missing = [name for name in _ENV if not os.environ.get(name)]
    if missing:
        raise HorovodLaunchError(
            "hvd.init() found no torch.distributed process group and cannot create one: "
            f"{', '.join(missing)} not set. Launch the ranks with %%distribute -n N in a notebook "
            "(after %load_ext jupyter_torchdist), `python -m jupyter_torchdist -n N script.py`, "
            "or `torchrun --nproc-per-node N script.py`.")
    env = tuple(os.environ[name] for name in _ENV)
    if _state.store is None or _state.store_env != env:
        _state.store, _, _ = next(rendezvous("env://"))
        _state.store_env, _state.generation = env, 0
    _state.generation += 1
    store = PrefixStore(f"jupyter_torchdist.horovod/init.{_state.generation}", _state.store)
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, store=store, rank=int(env[0]), world_size=int(env[1]))


def _host_layout() -> tuple[int, int, int, int]:
    """(local_rank, local_size, cross_rank, cross_size) from every rank's host name, when the launcher said nothing.

    Local ranks count in rank order within a host, hosts in order of their first rank, as Horovod does.
    """
    hosts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    me = hosts[dist.get_rank()]
    order = list(dict.fromkeys(hosts))
    return (hosts[:dist.get_rank()].count(me), hosts.count(me), order.index(me), len(order))


def _layout() -> tuple[int, int, int, int]:
    env = os.environ
    if "LOCAL_RANK" in env and "LOCAL_WORLD_SIZE" in env:
        local_size = int(env["LOCAL_WORLD_SIZE"])
        cross_size = int(env.get("GROUP_WORLD_SIZE") or max(1, dist.get_world_size() // max(1, local_size)))
        return int(env["LOCAL_RANK"]), local_size, int(env.get("GROUP_RANK") or 0), cross_size
    layout = _host_layout()
    if "LOCAL_RANK" in env:  # the launcher's local rank picks the GPU: keep it
        return (int(env["LOCAL_RANK"]),) + layout[1:]
    return layout


def init(comm: Any = None, process_sets: Any = None) -> None:
    """Adopt the default process group, or create it from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (env://).

    A no-op when already initialised. The backend created here is "cpu:gloo,cuda:nccl" when CUDA is available
    (CPU and CUDA tensors share one group, as in Horovod) and "gloo" otherwise. ``process_sets``: a list of
    ``hvd.ProcessSet`` (or rank lists) registered at once, the same on every rank.
    """
    if comm is not None:
        raise HorovodUnsupportedError(f"hvd.init(comm=...) is not supported: {UNSUPPORTED['mpi_threads_supported']}; "
                                      "init() takes the ranks from the launcher (use process sets for subsets).")
    if _state.initialized and dist.is_initialized():
        return
    owns = not dist.is_initialized()
    if owns:
        _create_group()
    _state.local_rank, _state.local_size, _state.cross_rank, _state.cross_size = _layout()
    config = str(dist.get_backend_config())
    _state.cpu_group = "cpu:" in config or config == "gloo"
    _state.join_protocol = os.environ.get(JOIN_ENV, "1").strip() != "0"
    _state.initialized, _state.owns_group = True, owns
    setup(control_device(), _state.join_protocol)
    for process_set in process_sets or ():
        add_process_set(process_set)


def shutdown() -> None:
    """Forget the group; destroy it only if ``init()`` created it (a launcher's group stays up until its exit).

    Collectives still pending (the other ranks never reached them) fail: their ``synchronize`` raises.
    """
    if _state.initialized:
        teardown("hvd.shutdown() was called before this collective ran on every rank",
                               destroy_groups=not _state.owns_group and dist.is_initialized())
    if _state.initialized and _state.owns_group and dist.is_initialized():
        dist.destroy_process_group()
    _state.initialized = False
    _state.owns_group = False


def is_initialized() -> bool:
    """True between ``init()`` and ``shutdown()``."""
    return _state.initialized and dist.is_initialized()


def size() -> int:
    """Number of ranks (torch.distributed's world size)."""
    check_initialized()
    return dist.get_world_size()


def rank() -> int:
    """This rank's global index."""
    check_initialized()
    return dist.get_rank()


def local_size() -> int:
    """Ranks on this host (LOCAL_WORLD_SIZE, else counted from host names)."""
    check_initialized()
    return _state.local_size


def local_rank() -> int:
    """This rank's index on its host (LOCAL_RANK, else counted from host names): the GPU to use."""
    check_initialized()
    return _state.local_rank


def cross_size() -> int:
    """Number of hosts (GROUP_WORLD_SIZE, else size() // local_size())."""
    check_initialized()
    return _state.cross_size


def cross_rank() -> int:
    """This host's index (GROUP_RANK, default 0)."""
    check_initialized()
    return _state.cross_rank


def is_homogeneous() -> bool:
    """True when every host runs the same number of ranks."""
    check_initialized()
    return _state.local_size * _state.cross_size == dist.get_world_size()


def control_device() -> torch.device:
    """Where small bookkeeping tensors go: CPU when the group has gloo, else this rank's current CUDA device."""
    if _state.cpu_group:
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def join_protocol() -> bool:
    """Whether allreduces carry the join protocol's control message (on unless JUPYTER_TORCHDIST_HOROVOD_JOIN=0)."""
    return _state.join_protocol


def mpi_threads_supported() -> bool:
    """Horovod raises without MPI; so do we, saying why."""
    raise HorovodUnsupportedError(f"hvd.mpi_threads_supported(): {UNSUPPORTED['mpi_threads_supported']}.")


def mpi_enabled() -> bool:
    """False: no MPI here."""
    return False


def mpi_built() -> bool:
    """False: no MPI here."""
    return False


def gloo_enabled() -> bool:
    """True when the default group runs gloo (CPU tensors)."""
    return is_initialized() and "gloo" in str(dist.get_backend_config())


def gloo_built() -> bool:
    """Whether this torch has gloo."""
    return dist.is_gloo_available()


def nccl_built() -> int:
    """NCCL's version as Horovod reports it (e.g. 21803 for 2.18.3; 2708 for 2.7.8), or 0 without NCCL."""
    if not dist.is_nccl_available() or not torch.cuda.is_available():
        return 0
    major, minor, patch = torch.cuda.nccl.version()[:3]  # type: ignore[no-untyped-call]
    return major * (10000 if (major, minor) >= (2, 9) else 1000) + minor * 100 + patch


def ddl_built() -> bool:
    """False: IBM DDL is not used."""
    return False


def ccl_built() -> bool:
    """False: oneCCL is not used."""
    return False


def cuda_built() -> bool:
    """Whether this torch was built with CUDA."""
    return torch.version.cuda is not None


def rocm_built() -> bool:
    """Whether this torch was built for ROCm."""
    return torch.version.hip is not None
