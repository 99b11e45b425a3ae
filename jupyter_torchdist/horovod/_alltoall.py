"""alltoall, with or without ``splits``, differentiable (Horovod >= 0.23's return values)."""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from ._basics import check_initialized
from ._channel import Channel
from ._handles import Handle, Rows
from ._ops import check_tensor
from ._process_sets import resolve
from ._request import ALLTOALL, Request, describe
from ._wire import movable

__all__ = ["alltoall", "alltoall_async"]


def _send_splits(tensor: torch.Tensor, splits: Any, world: int) -> list[int]:
    """Rows for each rank of the set: ``splits`` (a list, or an integer tensor), else equal parts of dim 0."""
    if tensor.dim() == 0:
        raise ValueError("alltoall needs a tensor with at least one dimension")
    if splits is None:
        if tensor.shape[0] % world:
            raise ValueError(f"alltoall without splits needs dim 0 ({tensor.shape[0]}) divisible by the number of "
                             f"ranks ({world})")
        return [tensor.shape[0] // world] * world
    if isinstance(splits, torch.Tensor):
        if splits.dtype.is_floating_point or splits.dtype.is_complex or splits.dtype == torch.bool:
            raise ValueError(f"splits must be a tensor of integers (int32), got {splits.dtype}")
        splits = splits.tolist()
    sizes = [int(s) for s in splits]
    if len(sizes) != world or min(sizes) < 0:
        raise ValueError(f"splits {sizes} must give one non-negative count per rank ({world})")
    if sum(sizes) > tensor.shape[0]:
        raise ValueError(f"the splits {sizes} sum to {sum(sizes)}, more than the first dimension of the tensor "
                         f"({tensor.shape[0]})")
    return sizes


def _exchange(tensor: torch.Tensor, sent: list[int], channel: Channel) -> tuple[dist.Work, torch.Tensor, list[int]]:
    """Exchange the row counts (every rank agreed to this alltoall), then start the data exchange."""
    counts = torch.tensor(sent, dtype=torch.int64, device=tensor.device)
    received = torch.empty_like(counts)
    dist.all_to_all_single(received, counts, group=channel.group)
    got = [int(n) for n in received.tolist()]
    out = tensor.new_empty((sum(got), *tensor.shape[1:]))
    data = tensor.detach().narrow(0, 0, sum(sent)).contiguous()
    work = dist.all_to_all_single(movable(out), movable(data), got, sent, group=channel.group, async_op=True)
    assert work is not None
    return work, out, got


def _start(tensor: torch.Tensor, splits: Any, name: str | None, process_set: Any, wait: bool,
           with_splits: bool) -> Handle:
    channel = resolve(process_set, "alltoall")
    sent = _send_splits(tensor, splits, channel.size)
    split_dtype = splits.dtype if isinstance(splits, torch.Tensor) else torch.int32
    split_device = splits.device if isinstance(splits, torch.Tensor) else torch.device("cpu")

    def launch(rows: Rows | None) -> tuple[list[dist.Work], Any]:
        work, out, got = _exchange(tensor, sent, channel)
        if not with_splits:
            return [work], lambda: out
        return [work], lambda: (out, torch.tensor(got, dtype=split_dtype, device=split_device))
    signature = (str(tensor.dtype), tensor.dim(), tuple(tensor.shape[1:]), tensor.is_cuda)
    request = Request(ALLTOALL, name, signature, describe(tensor))
    return channel.submit(Handle(request, launch, channel), wait)


def alltoall_async(tensor: torch.Tensor, splits: Any = None, name: str | None = None,
                   process_set: Any = None) -> Handle:
    """Start an alltoall; ``synchronize`` gives what ``alltoall`` returns."""
    check_initialized()
    check_tensor(tensor)
    return _start(tensor, splits, name, process_set, False, splits is not None)


class _Alltoall(torch.autograd.Function):
    """Differentiable alltoall: the gradient goes back along the received splits (Horovod's rule)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, splits: Any, name: str | None, process_set: Any) -> Any:
        out, received = _start(tensor, splits, name, process_set, True, True).wait()
        ctx.received, ctx.process_set = received.tolist(), process_set
        if splits is None:
            return out
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *unused: Any) -> tuple[Any, ...]:
        back = _start(grad.contiguous(), ctx.received, None, ctx.process_set, True, False).wait()
        return back, None, None, None


def alltoall(tensor: torch.Tensor, splits: Any = None, name: str | None = None, process_set: Any = None) -> Any:
    """Send rows ``splits[i]`` (default: equal parts of dim 0) to the set's i-th rank; gather what every rank sent.

    As in Horovod >= 0.23: without ``splits`` returns the received tensor; with ``splits`` returns
    ``(received tensor, received splits)``, the splits an int32 tensor (or ``splits``' dtype when it is a tensor).
    """
    check_initialized()
    check_tensor(tensor)
    if torch.is_grad_enabled() and tensor.requires_grad:
        return _Alltoall.apply(tensor, splits, name, process_set)  # type: ignore[no-untyped-call]
    return _start(tensor, splits, name, process_set, True, splits is not None).wait()
