"""broadcast_parameters and broadcast_optimizer_state: make every rank start from rank root's model and optimizer.

Tensors travel in flat buffers of at most 64 MB per (device, dtype) rather than one broadcast each: hundreds of
small parameters cost a handful of collectives.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from .basics import check_initialized
from .mpi_ops import broadcast_async_, broadcast_object
from .optimizer import _DistributedOptimizer

__all__ = ["broadcast_parameters", "broadcast_optimizer_state"]


_BUFFER_BYTES = 64 << 20


def _chunks(tensors: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """Tensors grouped by (device, dtype) in order of first appearance, each group cut at _BUFFER_BYTES."""
    groups: dict[tuple[torch.device, torch.dtype], list[list[torch.Tensor]]] = {}
    filled: dict[tuple[torch.device, torch.dtype], int] = {}
    for t in tensors:
        key = (t.device, t.dtype)
        chunks = groups.setdefault(key, [[]])
        if chunks[-1] and filled[key] + t.nbytes > _BUFFER_BYTES:
            chunks.append([])
            filled[key] = 0
        chunks[-1].append(t)
        filled[key] = filled.get(key, 0) + t.nbytes
    return [chunk for chunks in groups.values() for chunk in chunks]


def _broadcast_tensors(tensors: list[torch.Tensor], root_rank: int) -> None:
    """Overwrite every tensor in place with root's, flattening each chunk into one buffer."""
    pending = []
    for chunk in _chunks(tensors):
        flat = torch.cat([t.detach().reshape(-1) for t in chunk])
        pending.append((chunk, flat, broadcast_async_(flat, root_rank)))
    with torch.no_grad():
        for chunk, flat, handle in pending:
            handle.wait()
            if dist.get_rank() != root_rank:
                for t, part in zip(chunk, flat.split_with_sizes([t.numel() for t in chunk])):
                    t.copy_(part.view_as(t))


def broadcast_parameters(params: Any, root_rank: int) -> None:
    """Copy rank ``root_rank``'s tensors into every rank's, in place.

    ``params``: a ``state_dict()`` or other dict of tensors (taken in sorted key order, as Horovod does), or a
    list/iterable of tensors or (name, tensor) pairs such as ``model.named_parameters()`` (in its order).
    """
    check_initialized()
    if isinstance(params, Mapping):
        items = sorted(params.items(), key=lambda kv: kv[0])
    elif isinstance(params, Iterable):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError(f"invalid params of type: {type(params)}")
    for name, value in items:
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"broadcast_parameters takes tensors; {name!r} is a {type(value).__name__} "
                            "(use hvd.broadcast_object for other values)")
    _broadcast_tensors([value for _, value in items], root_rank)


@dataclass(frozen=True)
class _Slot:
    """Stands in for a tensor in the optimizer state's structure while the structure travels as an object."""

    index: int
    shape: tuple[int, ...]
    dtype: torch.dtype
    on_cpu: bool


def _strip(value: Any, tensors: list[torch.Tensor]) -> Any:
    """``value`` with each tensor replaced by a _Slot; the tensors are appended to ``tensors`` in order."""
    if isinstance(value, torch.Tensor):
        tensors.append(value if value.device.type == "cpu" else value.to(_cuda_device()))
        return _Slot(len(tensors) - 1, tuple(value.shape), value.dtype, value.device.type == "cpu")
    if isinstance(value, dict):
        return {k: _strip(v, tensors) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_strip(v, tensors) for v in value)
    return value


def _fill(value: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(value, _Slot):
        return tensors[value.index]
    if isinstance(value, dict):
        return {k: _fill(v, tensors) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_fill(v, tensors) for v in value)
    return value


def _slots(value: Any) -> list[_Slot]:
    if isinstance(value, _Slot):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [slot for v in value for slot in _slots(v)]
    return []


def _cuda_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())


def _initialise_state(optimizer: torch.optim.Optimizer) -> None:
    """Horovod's state initialisation for an optimizer without state: a zero gradient for every parameter that
    requires one (frozen parameters keep None), then one step of the wrapped optimizer (never a distributed step,
    which would wait for the other ranks). Unlike Horovod's, the parameters are left as they were (a weight-decay
    step on zero gradients moves them, on the ranks without state only)."""
    params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    saved = [p.detach().clone() for p in params]
    for p in params:
        p.grad = torch.zeros_like(p)
        if isinstance(optimizer, torch.optim.SparseAdam):
            p.grad = p.grad.to_sparse()
    local = isinstance(optimizer, _DistributedOptimizer)
    target: Any = optimizer
    (super(_DistributedOptimizer, target).step if local else optimizer.step)()
    with torch.no_grad():
        for p, value in zip(params, saved):
            p.copy_(value)


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int, model: Any = None) -> None:
    """Give every rank's optimizer rank ``root_rank``'s state_dict: per-parameter state and hyperparameters.

    As in Horovod, an optimizer without state first gets it (zero gradients on the parameters that require one,
    and one local step: see ``_initialise_state``), so every rank ends with the same state and ``.grad`` tensors
    whatever it had; then the structure travels as an object, the tensors in flat buffers, and each rank loads
    the root's with ``load_state_dict``. ``model`` is accepted for Horovod compatibility and not needed.
    """
    check_initialized()
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if not optimizer.state_dict()["state"]:
        _initialise_state(optimizer)
    root = dist.get_rank() == root_rank
    tensors: list[torch.Tensor] = []
    skeleton = broadcast_object(_strip(optimizer.state_dict(), tensors) if root else None, root_rank)
    if not root:
        tensors = [torch.empty(s.shape, dtype=s.dtype, device="cpu" if s.on_cpu else _cuda_device())
                   for s in sorted(_slots(skeleton), key=lambda s: s.index)]
    _broadcast_tensors(tensors, root_rank)
    if not root:
        optimizer.load_state_dict(_fill(skeleton, tensors))
