"""grouped_allreduce: a list of tensors reduced by one negotiated collective, in one flat buffer per dtype.

The results equal the single allreduces' (the same sums, the same scaling); a list of one dtype is one all_reduce.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from ._basics import check_initialized
from ._compression import Compression, Compressor
from ._errors import HorovodInternalError
from ._handles import Handle, Rows
from ._ops import WIRE, ReduceOp, check_tensor, postscale_, reduce_request, resolve_op, scale_
from ._process_sets import resolve
from ._request import ALLREDUCE
from ._wire import WIRE_OPS, reduce_dtype

__all__ = ["grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
           "check_group"]


def check_group(tensors: Any, what: str) -> list[torch.Tensor]:
    """A non-empty list of tensors on one device (Horovod refuses a group that mixes CPU and GPU)."""
    if isinstance(tensors, torch.Tensor) or not tensors:
        raise ValueError(f"{what} takes a non-empty list of tensors")
    tensors = list(tensors)
    for t in tensors:
        check_tensor(t)
    if len({t.device.type for t in tensors}) > 1:
        raise HorovodInternalError(f"{what}: every tensor of a group must be on the same device (CPU or GPU); got "
                                   f"{sorted({str(t.device) for t in tensors})}")
    return tensors


def _start(tensors: list[torch.Tensor], op: ReduceOp, pre: float, post: float, name: str | None,
           process_set: Any, wait: bool) -> Handle:
    """Reduce every tensor of ``tensors`` in place, as one negotiated collective."""
    if any(not t.is_contiguous() for t in tensors):
        raise ValueError("Tensor is required to be contiguous.")
    channel = resolve(process_set, "grouped_allreduce")
    by_dtype: dict[torch.dtype, list[int]] = {}
    for i, t in enumerate(tensors):
        by_dtype.setdefault(reduce_dtype(t.dtype), []).append(i)
    flats = {dtype: tensors[idx[0]].new_empty(sum(tensors[i].numel() for i in idx), dtype=dtype)
             for dtype, idx in by_dtype.items()}

    def launch(rows: Rows | None) -> tuple[list[dist.Work], Any]:
        works = []
        for dtype, idx in by_dtype.items():
            torch.cat([tensors[i].reshape(-1).to(dtype) for i in idx], out=flats[dtype])
            scale_(flats[dtype], pre)
            works.append(dist.all_reduce(flats[dtype], op=WIRE_OPS[WIRE[op]], group=channel.group, async_op=True))

        def finish() -> list[torch.Tensor]:
            for dtype, idx in by_dtype.items():
                reduced = postscale_(flats[dtype], op, post, channel.size)
                parts = reduced.split_with_sizes([tensors[i].numel() for i in idx])
                for i, part in zip(idx, parts):
                    tensors[i].copy_(part.view(tensors[i].shape))
            return tensors
        return works, finish
    wire = next(iter(flats.values())) if len(flats) == 1 else None
    request = reduce_request(ALLREDUCE, tensors, wire, op, pre, post, name)
    return channel.submit(Handle(request, launch, channel), wait)


def grouped_allreduce_async_(tensors: list[torch.Tensor], average: bool | None = None, name: str | None = None,
                             op: Any = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                             process_set: Any = None) -> Handle:
    """Start reducing every tensor in place; ``synchronize`` returns the list."""
    check_initialized()
    tensors = check_group(tensors, "grouped_allreduce")
    return _start(tensors, resolve_op(op, average), prescale_factor, postscale_factor, name, process_set, False)


def grouped_allreduce_(tensors: list[torch.Tensor], average: bool | None = None, name: str | None = None,
                       op: Any = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                       process_set: Any = None) -> list[torch.Tensor]:
    """Reduce every tensor in place, in one collective; returns the list."""
    check_initialized()
    tensors = check_group(tensors, "grouped_allreduce_")
    return _start(tensors, resolve_op(op, average), prescale_factor, postscale_factor, name, process_set,
                  True).wait()


def grouped_allreduce_async(tensors: list[torch.Tensor], average: bool | None = None, name: str | None = None,
                            op: Any = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set: Any = None) -> Handle:
    """Start reducing copies of the tensors; ``synchronize`` returns the reduced copies."""
    check_initialized()
    copies = [t.detach().clone(memory_format=torch.contiguous_format)
              for t in check_group(tensors, "grouped_allreduce")]
    return _start(copies, resolve_op(op, average), prescale_factor, postscale_factor, name, process_set, False)


class _GroupedAllreduce(torch.autograd.Function):
    """Differentiable grouped allreduce: each gradient is reduced with the same op and factors (Horovod's rule)."""

    @staticmethod
    def forward(ctx: Any, op: ReduceOp, pre: float, post: float, name: str | None, process_set: Any,
                *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.op, ctx.pre, ctx.post, ctx.process_set = op, pre, post, process_set
        copies = [t.detach().clone(memory_format=torch.contiguous_format) for t in tensors]
        return tuple(_start(copies, op, pre, post, name, process_set, True).wait())

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        reduced = grouped_allreduce(list(grads), op=ctx.op, prescale_factor=ctx.pre, postscale_factor=ctx.post,
                                    process_set=ctx.process_set)
        return (None, None, None, None, None, *reduced)


def grouped_allreduce(tensors: list[torch.Tensor], average: bool | None = None, name: str | None = None,
                      compression: type[Compressor] = Compression.none, op: Any = None,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: Any = None) -> list[torch.Tensor]:
    """Reduce a list of tensors in one collective; new tensors, equal to ``allreduce`` of each (differentiable)."""
    check_initialized()
    tensors = check_group(tensors, "grouped_allreduce")
    reduce_op = resolve_op(op, average)
    wires, ctxs = zip(*(compression.compress(t) for t in tensors))
    if torch.is_grad_enabled() and any(w.requires_grad for w in wires):
        outs = _GroupedAllreduce.apply(  # type: ignore[no-untyped-call]
            reduce_op, prescale_factor, postscale_factor, name, process_set, *wires)
    else:
        copies = [w.detach().clone(memory_format=torch.contiguous_format) for w in wires]
        outs = _start(copies, reduce_op, prescale_factor, postscale_factor, name, process_set, True).wait()
    return [compression.decompress(o, c) for o, c in zip(outs, ctxs)]
