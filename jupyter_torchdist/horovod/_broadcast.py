"""broadcast, in place and into a new tensor, differentiable; the root is a global rank, as in Horovod."""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from ._basics import check_initialized
from ._handles import Handle, Rows
from ._ops import Average, allreduce, check_tensor
from ._process_sets import resolve
from ._request import BROADCAST, Request, describe
from ._wire import movable

__all__ = ["broadcast", "broadcast_", "broadcast_async", "broadcast_async_"]


def _start(tensor: torch.Tensor, root_rank: int, name: str | None, process_set: Any, wait: bool) -> Handle:
    """Overwrite ``tensor`` in place with rank ``root_rank``'s once every rank agrees on shape, dtype and root."""
    if not tensor.is_contiguous():
        raise ValueError("Tensor is required to be contiguous.")
    channel = resolve(process_set, "broadcast")

    def launch(rows: Rows | None) -> tuple[list[dist.Work], Any]:
        if root_rank not in channel.ranks:
            raise ValueError(f"broadcast: root_rank {root_rank} is not a rank of the process set (ranks "
                             f"{channel.ranks})")
        work = dist.broadcast(movable(tensor), src=root_rank, group=channel.group, async_op=True)
        assert work is not None
        return [work], lambda: tensor
    signature = (str(tensor.dtype), tuple(tensor.shape), root_rank, tensor.is_cuda)
    request = Request(BROADCAST, name, signature, f"{describe(tensor)}, root {root_rank}")
    return channel.submit(Handle(request, launch, channel), wait)


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                     process_set: Any = None) -> Handle:
    """Start overwriting ``tensor`` with rank ``root_rank``'s, in place."""
    check_initialized()
    check_tensor(tensor)
    return _start(tensor, root_rank, name, process_set, False)


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: Any = None) -> Handle:
    """Start a broadcast into a new tensor; ``tensor`` is not modified."""
    check_initialized()
    check_tensor(tensor)
    return _start(tensor.detach().clone(memory_format=torch.contiguous_format), root_rank, name, process_set, False)


def broadcast_(tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: Any = None) -> torch.Tensor:
    """Overwrite ``tensor`` in place with rank ``root_rank``'s; returns it."""
    check_initialized()
    check_tensor(tensor)
    result: torch.Tensor = _start(tensor, root_rank, name, process_set, True).wait()
    return result


class _Broadcast(torch.autograd.Function):
    """Differentiable broadcast: the root gets the averaged gradient, the other ranks zero (Horovod's rule)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, root_rank: int, name: str | None, process_set: Any) -> torch.Tensor:
        ctx.root_rank, ctx.process_set = root_rank, process_set
        copy = tensor.detach().clone(memory_format=torch.contiguous_format)
        result: torch.Tensor = _start(copy, root_rank, name, process_set, True).wait()
        return result

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        reduced = allreduce(grad, op=Average, process_set=ctx.process_set)
        return (reduced if dist.get_rank() == ctx.root_rank else reduced * 0), None, None, None


def broadcast(tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: Any = None) -> torch.Tensor:
    """Rank ``root_rank``'s tensor, as a new tensor on every rank (differentiable)."""
    check_initialized()
    check_tensor(tensor)
    if torch.is_grad_enabled() and tensor.requires_grad:
        out: torch.Tensor = _Broadcast.apply(tensor, root_rank, name, process_set)  # type: ignore[no-untyped-call]
        return out
    copy = tensor.detach().clone(memory_format=torch.contiguous_format)
    result: torch.Tensor = _start(copy, root_rank, name, process_set, True).wait()
    return result
