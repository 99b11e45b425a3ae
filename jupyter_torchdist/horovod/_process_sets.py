"""Process sets: Horovod's subsets of ranks that run collectives together, each a torch.distributed group.

``add_process_set(ranks)`` is what ``torch.distributed.new_group(ranks)`` is, and like it (and like Horovod's) it is
called by every rank, in the same order. Each set has its own negotiation (``_channel``) on its own group, so the
sets' collectives never wait for each other. A rank outside a set that calls a collective on it gets Horovod's
error (a ``HorovodInternalError`` saying it is not a member); the set's rank and size are relative to the set, and
root ranks stay global ranks, as in Horovod.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist

from ._channel import Channel
from ._errors import HorovodInternalError, HorovodNotInitializedError, HorovodUnsupportedError

__all__ = ["ProcessSet", "global_process_set", "add_process_set", "remove_process_set", "setup", "teardown",
           "resolve", "global_channel"]


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
