"""Horovod elastic (``hvd.elastic``) on the restarts of ``%%distribute --max-restarts``.

Horovod keeps the training processes alive when a host goes: the survivors catch ``HorovodInternalError``, roll
their ``State`` back to the last ``commit()`` held in memory, and carry on with fewer (or, later, more) workers.
Here a lost rank, host or executor restarts *every* rank on the same number of slots (``--max-restarts K``,
``horovod.spark.run_elastic(reset_limit=K)``), so a commit must outlive the processes: ``state.commit()`` is
``jt.commit`` (rank 0 writes the state once, atomically, to the run's checkpoint folder) as well as Horovod's
in-memory copy, and ``hvd.elastic.run`` starts each attempt from the last commit, the same on every rank, with the
reset callbacks called as Horovod calls them after a reset. The number of ranks never changes: where Horovod would
shrink to ``min_np`` or grow to ``max_np``, the run waits for its N slots again (Spark reschedules the tasks).

Code written for Horovod runs unchanged::

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch in range(state.batch, steps):
                ...
                if state.batch % 10 == 0:
                    state.commit()
            state.batch = 0

    train(state)

Outside a run with a checkpoint folder (no ``--max-restarts``/``--checkpoint-dir``) a commit stays in memory, as
in Horovod, and nothing restarts.
"""
from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from ..rank import api as jt
from .basics import init, is_initialized, rank, size
from .errors import HorovodInternalError, HostsUpdatedInterrupt
from .functions import broadcast_optimizer_state, broadcast_parameters
from .mpi_ops import allgather_object, broadcast_object

__all__ = ["State", "ObjectState", "TorchState", "ElasticSampler", "run", "HorovodInternalError",
           "HostsUpdatedInterrupt"]


class State:
    """What a restart resumes from: ``save``/``restore`` (the in-memory copy), ``sync`` (rank 0's to every rank),
    and ``commit`` (save, and persist as the run's latest commit). Subclasses say what they hold."""

    def __init__(self) -> None:
        self._reset_callbacks: list[Callable[[], None]] = []
        self._commits = 0  # this run's commits so far: jt.commit's step, so the latest is the one resumed

    def register_reset_callbacks(self, callbacks: Iterable[Callable[[], None]]) -> None:
        """Functions called after a reset (here: when an attempt resumes from a commit), e.g. to rescale the
        learning rate to ``hvd.size()``, which stays the same here."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp: float, update_res: Any) -> None:
        """Horovod's host-discovery hook; hosts never change within an attempt here."""

    def commit(self) -> None:
        """Save the state in memory and as the run's latest commit (every rank calls it, at the same point)."""
        self.save()
        self._commits += 1
        jt.commit(self._commits, **self._to_commit())
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Never raises ``HostsUpdatedInterrupt``: the set of ranks is fixed for an attempt."""

    def save(self) -> None:
        raise NotImplementedError

    def restore(self) -> None:
        raise NotImplementedError

    def sync(self) -> None:
        raise NotImplementedError

    def _to_commit(self) -> dict[str, Any]:
        """What ``jt.commit`` writes, by name (every rank computes it: it may take a collective)."""
        raise NotImplementedError

    def _to_restore(self) -> dict[str, Any]:
        """What ``jt.restore`` loads into, by the same names."""
        raise NotImplementedError

    def _resume(self) -> bool:
        """Load the run's latest commit, if an earlier attempt made one; whether one was loaded."""
        step = jt.restore(**self._to_restore())
        self._commits = step
        return step > 0


class ObjectState(State):
    """Plain values as attributes (``state.epoch``, ``state.batch``), committed and broadcast as one dict.
    Horovod's first two arguments (``bcast_object``, ``get_rank``) may be given and are not needed."""

    def __init__(self, bcast_object: Any = None, get_rank: Any = None, **kwargs: Any) -> None:
        super().__init__()
        self._value_names = list(kwargs)
        for name, value in kwargs.items():
            setattr(self, name, value)
        self._saved_values = self._values()

    def _values(self) -> dict[str, Any]:
        return {name: copy.deepcopy(getattr(self, name)) for name in self._value_names}

    def _set_values(self, values: dict[str, Any]) -> None:
        for name, value in values.items():
            setattr(self, name, value)

    def save(self) -> None:
        self._saved_values = self._values()

    def restore(self) -> None:
        self._set_values(copy.deepcopy(self._saved_values))

    def sync(self) -> None:
        if self._value_names:
            self._set_values(broadcast_object(self._values(), 0))
        self.save()

    def _to_commit(self) -> dict[str, Any]:
        return {"values": self._values()}

    def _to_restore(self) -> dict[str, Any]:
        self._restored: dict[str, Any] = {}  # refilled in place by jt.restore
        return {"values": self._restored}

    def _resume(self) -> bool:
        resumed = super()._resume()
        if resumed:
            self._set_values(self._restored)
        return resumed


class TorchState(ObjectState):
    """A model, an optimizer, other objects with ``state_dict`` (an ``ElasticSampler``, an LR scheduler) and plain
    values (``epoch=0, batch=0``), as Horovod's ``TorchState``."""

    def __init__(self, model: torch.nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None,
                 **kwargs: Any) -> None:
        stateful = {k: v for k, v in kwargs.items() if callable(getattr(v, "state_dict", None))}
        super().__init__(**{k: v for k, v in kwargs.items() if k not in stateful})
        self.model, self.optimizer = model, optimizer
        self._stateful = dict(stateful, model=model, optimizer=optimizer)
        for name, obj in stateful.items():
            setattr(self, name, obj)
        self._saved_dicts: dict[str, Any] = {}
        self.save()

    def _objects(self) -> dict[str, Any]:
        return {name: obj for name, obj in self._stateful.items() if obj is not None}

    def save(self) -> None:
        super().save()
        self._saved_dicts = {name: copy.deepcopy(obj.state_dict()) for name, obj in self._objects().items()}

    def restore(self) -> None:
        super().restore()
        for name, obj in self._objects().items():
            obj.load_state_dict(copy.deepcopy(self._saved_dicts[name]))

    def sync(self) -> None:
        for obj in self._objects().values():
            if isinstance(obj, torch.nn.Module):
                broadcast_parameters(obj.state_dict(), root_rank=0)
            elif isinstance(obj, torch.optim.Optimizer):
                broadcast_optimizer_state(obj, root_rank=0)
            elif isinstance(obj, ElasticSampler):
                obj.load_state_dict(obj.merged_state_dict())
            else:
                obj.load_state_dict(broadcast_object(obj.state_dict(), 0))
        super().sync()

    def _to_commit(self) -> dict[str, Any]:
        # a sampler's commit holds every rank's processed samples: gathered here, on every rank
        objects = {name: obj.merged_state_dict() if isinstance(obj, ElasticSampler) else obj
                   for name, obj in self._objects().items()}
        return {**objects, **super()._to_commit()}

    def _to_restore(self) -> dict[str, Any]:
        return {**self._objects(), **super()._to_restore()}


class ElasticSampler(torch.utils.data.Sampler[int]):
    """Horovod's sampler for elastic training: each rank's share of the samples not processed yet this epoch.

    ``record_batch(batch_idx, batch_size)`` after each batch marks that batch's samples processed; a commit holds
    every rank's, so a restarted attempt reads the rest of the epoch and nothing twice. ``set_epoch(e)`` starts an
    epoch afresh (shuffled with ``seed + e``)."""

    def __init__(self, dataset: Any, shuffle: bool = True, seed: int = 0) -> None:
        self.dataset, self.shuffle, self.seed = dataset, shuffle, seed
        self.epoch = 0
        self.processed_indices: set[int] = set()
        self.indices: list[int] = []
        self.reset()

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self.processed_indices = epoch, set()
        self.reset()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        self.record_indices(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices: Iterable[int]) -> None:
        self.processed_indices.update(indices)

    def get_indices(self, batch_idx: int, batch_size: int) -> list[int]:
        """This rank's samples of batch ``batch_idx`` of the current pass."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "processed_indices": set(self.processed_indices)}

    def merged_state_dict(self) -> dict[str, Any]:
        """This state with every rank's processed indices (a collective: every rank calls it)."""
        merged: set[int] = set().union(*allgather_object(self.processed_indices))
        return {"epoch": self.epoch, "processed_indices": merged}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.processed_indices = state["epoch"], set(state["processed_indices"])
        self.reset()

    def reset(self) -> None:
        """Recompute the remaining samples and this rank's share (the ranks and processed indices may have changed)."""
        self.num_replicas, self.rank = (size(), rank()) if is_initialized() else (1, 0)
        self.remaining_indices = [i for i in range(len(self.dataset)) if i not in self.processed_indices]
        self.num_samples = math.ceil(len(self.remaining_indices) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self) -> Iterator[int]:
        # the epoch's whole order, less what was processed: a resumed epoch reads the rest in the order, and on the
        # ranks, an uninterrupted one would have (Horovod shuffles the remainder afresh)
        everything: Iterable[int] = range(len(self.dataset))
        if self.shuffle:
            everything = torch.randperm(len(self.dataset),
                                        generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist()
        order = [i for i in everything if i not in self.processed_indices]
        order += order[:self.total_size - len(order)]  # pad so every rank gets num_samples
        self.indices = order[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self) -> int:
        return self.num_samples


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """``@hvd.elastic.run``: call ``func(state, ...)`` with the state every rank agrees on.

    A fresh run starts from rank 0's state; an attempt restarted after a lost rank starts from the last
    ``state.commit()`` (model, optimizer, sampler and values), then calls the reset callbacks. A failure is not
    retried inside the process, as Horovod does: the run's restart (``--max-restarts``) starts every rank again."""
    @functools.wraps(func)
    def wrapper(state: State, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(state, State):
            raise TypeError(f"hvd.elastic.run: the first argument must be the hvd.elastic state (TorchState or "
                            f"ObjectState), got {type(state).__name__}")
        if not is_initialized():
            init()
        resumed = state._resume()
        state.sync()
        if resumed:
            state.on_reset()
        return func(state, *args, **kwargs)

    return wrapper
