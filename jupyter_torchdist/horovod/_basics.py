"""init/shutdown, the rank layout, and the honest answers to Horovod's build queries.

The process group is torch.distributed's default group. ``init()`` adopts one that is already up (our
launchers, torchrun scripts that called ``init_process_group``) and otherwise creates it from the torchrun-style
environment. Only a group created here is ever destroyed here: the launchers own theirs, and a Python-side
destroy of someone else's gloo group can deadlock in its teardown.

``init()`` after ``shutdown()`` (Horovod allows it) creates a new group whose rendezvous keys live under a prefix of
their own (``init.1/``, ``init.2/``...) in a store kept across inits: the env:// store outlives a destroyed group
(torchrun's agent store always does), and a rank that re-initialises first must not find the previous group's
addresses there, whose sockets are closed ("Gloo connectFullMesh failed ... Connection refused").
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import PrefixStore
from torch.distributed.rendezvous import rendezvous

from . import _process_sets
from ._errors import HorovodLaunchError, HorovodNotInitializedError, HorovodUnsupportedError, UNSUPPORTED

__all__ = ["init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size",
           "cross_rank", "is_homogeneous", "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled",
           "gloo_built", "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built", "check_initialized",
           "control_device", "join_protocol", "JOIN_ENV"]

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
    join_protocol: bool = True  # collectives are negotiated first (see _channel), so join() works
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
    _process_sets.setup(control_device(), _state.join_protocol)
    for process_set in process_sets or ():
        _process_sets.add_process_set(process_set)


def shutdown() -> None:
    """Forget the group; destroy it only if ``init()`` created it (a launcher's group stays up until its exit).

    Collectives still pending (the other ranks never reached them) fail: their ``synchronize`` raises.
    """
    if _state.initialized:
        _process_sets.teardown("hvd.shutdown() was called before this collective ran on every rank",
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
