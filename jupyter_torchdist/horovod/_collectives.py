"""allgather (first dims may differ), broadcast, alltoall, and their object forms, on torch.distributed."""
from __future__ import annotations

import zlib
from typing import Any

import cloudpickle
import torch
import torch.distributed as dist

from ._basics import check_initialized, check_process_set, control_device
from ._control import ALLGATHER, ALLTOALL, BROADCAST, require_all
from ._ops import Average, Handle, allreduce

__all__ = ["allgather", "allgather_async", "allgather_object", "broadcast", "broadcast_", "broadcast_async",
           "broadcast_async_", "broadcast_object", "alltoall", "alltoall_async"]

_MAX_DIMS = 16  # shapes travel as fixed-size vectors so ranks with different shapes still match collectives


def _check(process_set: Any, tensor: Any) -> None:
    check_initialized()
    check_process_set(process_set)
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")


def _gather_shapes(tensor: torch.Tensor) -> list[list[int]]:
    """Every rank's [dtype, ndim, *shape]; raise on all ranks alike when anything but the first dim differs."""
    if tensor.dim() == 0 or tensor.dim() > _MAX_DIMS:
        raise ValueError(f"allgather/alltoall need a tensor with 1 to {_MAX_DIMS} dimensions, got {tensor.dim()}")
    mine = torch.zeros(2 + _MAX_DIMS, dtype=torch.int64, device=tensor.device)
    mine[:2 + tensor.dim()] = torch.tensor([zlib.crc32(str(tensor.dtype).encode()), tensor.dim(), *tensor.shape])
    gathered = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, mine)
    shapes = [g.tolist() for g in gathered]
    for other in shapes:
        if other[0] != shapes[0][0]:
            raise ValueError("Mismatched data types: the ranks passed tensors of different dtypes.")
        if other[1] != shapes[0][1] or other[3:] != shapes[0][3:]:
            raise ValueError(f"Mismatched tensor shapes: ranks sent {[s[2:2 + s[1]] for s in shapes]}; only the "
                             "first dimension may differ.")
    return [s[2:2 + s[1]] for s in shapes]


def _allgather_parts(tensor: torch.Tensor) -> tuple[dist.Work, list[torch.Tensor], list[int]]:
    """Start gathering every rank's tensor, padded to the longest first dim; returns (work, buffers, first dims)."""
    require_all(ALLGATHER, tensor)
    firsts = [shape[0] for shape in _gather_shapes(tensor)]
    longest, rest = max(firsts), tensor.shape[1:]
    send = tensor.detach().contiguous()
    if send.shape[0] < longest:
        send = torch.cat([send, send.new_zeros((longest - send.shape[0], *rest))])
    buffers = [torch.empty_like(send) for _ in firsts]
    work = dist.all_gather(buffers, send, async_op=True)
    assert work is not None
    return work, buffers, firsts


def allgather_async(tensor: torch.Tensor, name: str | None = None, process_set: Any = None) -> Handle:
    """Start concatenating every rank's tensor along dim 0 (first dims may differ)."""
    _check(process_set, tensor)
    work, buffers, firsts = _allgather_parts(tensor)
    return Handle([work], lambda: torch.cat([b[:n] for b, n in zip(buffers, firsts)]))


class _Allgather(torch.autograd.Function):
    """Differentiable allgather; as in Horovod the gradient is this rank's slice of the averaged output gradient."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor) -> torch.Tensor:
        work, buffers, firsts = _allgather_parts(tensor)
        work.wait()
        ctx.offset, ctx.length = sum(firsts[:dist.get_rank()]), firsts[dist.get_rank()]
        return torch.cat([b[:n] for b, n in zip(buffers, firsts)])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return allreduce(grad, op=Average).narrow(0, ctx.offset, ctx.length)


def allgather(tensor: torch.Tensor, name: str | None = None, process_set: Any = None) -> torch.Tensor:
    """Concatenate every rank's tensor along dim 0, in rank order; first dims may differ, the rest must match."""
    _check(process_set, tensor)
    if torch.is_grad_enabled() and tensor.requires_grad:
        out: torch.Tensor = _Allgather.apply(tensor)  # type: ignore[no-untyped-call]
        return out
    result: torch.Tensor = allgather_async(tensor).wait()
    return result


def _check_root(root_rank: int) -> None:
    if not 0 <= root_rank < dist.get_world_size():
        raise ValueError(f"root_rank {root_rank} is not a rank (size {dist.get_world_size()})")


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                     process_set: Any = None) -> Handle:
    """Start overwriting ``tensor`` with rank ``root_rank``'s, in place."""
    _check(process_set, tensor)
    _check_root(root_rank)
    if not tensor.is_contiguous():
        raise ValueError("Tensor is required to be contiguous.")
    require_all(BROADCAST, tensor, root_rank)
    work = dist.broadcast(tensor, src=root_rank, async_op=True)
    assert work is not None
    return Handle([work], lambda: tensor)


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: Any = None) -> Handle:
    """Start a broadcast into a new tensor; ``tensor`` is not modified."""
    _check(process_set, tensor)
    return broadcast_async_(tensor.detach().clone(memory_format=torch.contiguous_format), root_rank)


def broadcast_(tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: Any = None) -> torch.Tensor:
    """Overwrite ``tensor`` in place with rank ``root_rank``'s; returns it."""
    result: torch.Tensor = broadcast_async_(tensor, root_rank, name, process_set).wait()
    return result


class _Broadcast(torch.autograd.Function):
    """Differentiable broadcast: the root gets the averaged gradient, the other ranks zero (Horovod's rule)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, root_rank: int) -> torch.Tensor:
        ctx.root_rank = root_rank
        result: torch.Tensor = broadcast_async(tensor, root_rank).wait()
        return result

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        reduced = allreduce(grad, op=Average)
        return (reduced if dist.get_rank() == ctx.root_rank else reduced * 0), None


def broadcast(tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: Any = None) -> torch.Tensor:
    """Rank ``root_rank``'s tensor, as a new tensor on every rank (differentiable)."""
    _check(process_set, tensor)
    if torch.is_grad_enabled() and tensor.requires_grad:
        out: torch.Tensor = _Broadcast.apply(tensor, root_rank)  # type: ignore[no-untyped-call]
        return out
    result: torch.Tensor = broadcast_async(tensor, root_rank).wait()
    return result


def _send_splits(tensor: torch.Tensor, splits: Any) -> list[int]:
    world = dist.get_world_size()
    if splits is None:
        if tensor.shape[0] % world:
            raise ValueError(f"alltoall without splits needs dim 0 ({tensor.shape[0]}) divisible by size ({world})")
        return [tensor.shape[0] // world] * world
    sizes = [int(s) for s in (splits.tolist() if isinstance(splits, torch.Tensor) else splits)]
    if len(sizes) != world or min(sizes) < 0 or sum(sizes) != tensor.shape[0]:
        raise ValueError(f"splits {sizes} must give one non-negative count per rank ({world}) summing to dim 0 "
                         f"({tensor.shape[0]})")
    return sizes


def _alltoall_start(tensor: torch.Tensor, splits: Any) -> tuple[dist.Work, torch.Tensor, list[int]]:
    """Exchange the split sizes, then start the data exchange; returns (work, output, rows received per rank)."""
    require_all(ALLTOALL, tensor)
    _gather_shapes(tensor)
    sent = _send_splits(tensor, splits)
    counts = torch.tensor(sent, dtype=torch.int64, device=tensor.device)
    received = torch.empty_like(counts)
    dist.all_to_all_single(received, counts)
    got = [int(n) for n in received.tolist()]
    out = tensor.new_empty((sum(got), *tensor.shape[1:]))
    work = dist.all_to_all_single(out, tensor.detach().contiguous(), got, sent, async_op=True)
    assert work is not None
    return work, out, got


def _splits_tensor(got: list[int], splits: Any) -> torch.Tensor:
    return torch.tensor(got, dtype=splits.dtype if isinstance(splits, torch.Tensor) else torch.int32)


def alltoall_async(tensor: torch.Tensor, splits: Any = None, name: str | None = None,
                   process_set: Any = None) -> Handle:
    """Start an alltoall; ``synchronize`` gives what ``alltoall`` returns."""
    _check(process_set, tensor)
    work, out, got = _alltoall_start(tensor, splits)
    if splits is None:
        return Handle([work], lambda: out)
    return Handle([work], lambda: (out, _splits_tensor(got, splits)))


class _Alltoall(torch.autograd.Function):
    """Differentiable alltoall: the gradient goes back along the received splits (Horovod's rule)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, splits: Any) -> Any:
        work, out, got = _alltoall_start(tensor, splits)
        work.wait()
        ctx.received = got
        if splits is None:
            return out
        received = _splits_tensor(got, splits)
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *unused: Any) -> tuple[torch.Tensor, None]:
        work, back, _ = _alltoall_start(grad.contiguous(), ctx.received)
        work.wait()
        return back, None


def alltoall(tensor: torch.Tensor, splits: Any = None, name: str | None = None, process_set: Any = None) -> Any:
    """Send rows ``splits[i]`` (default: equal parts of dim 0) to rank i; gather what every rank sent here.

    As in Horovod >= 0.23: without ``splits`` returns the received tensor; with ``splits`` returns
    ``(received tensor, received splits)``, the splits an int32 tensor (or ``splits``' dtype when it is a tensor).
    """
    _check(process_set, tensor)
    if torch.is_grad_enabled() and tensor.requires_grad:
        return _Alltoall.apply(tensor, splits)  # type: ignore[no-untyped-call]
    return alltoall_async(tensor, splits).wait()


def broadcast_object(obj: Any, root_rank: int = 0, name: str | None = None, process_set: Any = None) -> Any:
    """Rank ``root_rank``'s object on every rank (cloudpickled, like Horovod)."""
    check_initialized()
    check_process_set(process_set)
    device, root = control_device(), dist.get_rank() == root_rank
    payload = bytearray(cloudpickle.dumps(obj)) if root else bytearray()
    length = broadcast_(torch.tensor([len(payload)], dtype=torch.int64, device=device), root_rank)
    if root:
        data = torch.frombuffer(payload, dtype=torch.uint8).to(device)
    else:
        data = torch.empty(int(length[0]), dtype=torch.uint8, device=device)
    broadcast_(data, root_rank)
    return obj if root else cloudpickle.loads(data.cpu().numpy().tobytes())


def allgather_object(obj: Any, name: str | None = None, process_set: Any = None) -> list[Any]:
    """Every rank's object, in rank order (cloudpickled, like Horovod)."""
    check_initialized()
    check_process_set(process_set)
    payload = bytearray(cloudpickle.dumps(obj))
    data = torch.frombuffer(payload, dtype=torch.uint8).to(control_device())
    work, buffers, firsts = _allgather_parts(data)
    work.wait()
    return [cloudpickle.loads(b[:n].cpu().numpy().tobytes()) for b, n in zip(buffers, firsts)]
