"""Reduction ops and the allreduce family (with Horovod's scaling and autograd semantics), and barrier."""
from __future__ import annotations

import enum
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ._basics import JOIN_ENV, check_initialized, join_protocol
from ._channel import Channel
from ._compression import Compression, Compressor
from ._errors import UNSUPPORTED, HorovodUnsupportedError
from ._handles import Handle, Rows
from ._process_sets import resolve
from ._request import ALLREDUCE, BARRIER, Request, describe, wire_fields
from ._wire import WIRE_OPS, for_reduction

__all__ = ["ReduceOp", "Average", "Sum", "Adasum", "Min", "Max", "Product", "WIRE", "resolve_op", "scale_",
           "op_text", "postscale_", "reduce_request", "raw_allreduce", "start_allreduce", "allreduce", "allreduce_",
           "allreduce_async", "allreduce_async_", "barrier", "join", "check_tensor"]


class ReduceOp(enum.IntEnum):
    """Horovod's reduction ops, with Horovod's numbering."""

    AVERAGE = 0
    SUM = 1
    ADASUM = 2
    MIN = 3
    MAX = 4
    PRODUCT = 5


Average, Sum, Adasum = ReduceOp.AVERAGE, ReduceOp.SUM, ReduceOp.ADASUM
Min, Max, Product = ReduceOp.MIN, ReduceOp.MAX, ReduceOp.PRODUCT
WIRE = {Average: 0, Sum: 0, Min: 1, Max: 2, Product: 3}  # index into _wire.WIRE_OPS: Average is a scaled SUM


def resolve_op(op: Any, average: bool | None) -> ReduceOp:
    """Horovod's rules: ``average`` is the deprecated spelling of Average/Sum, never together with ``op``."""
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed in v1.0",
                      DeprecationWarning, stacklevel=3)
        op = Average if average else Sum
    if op is None:
        return Average
    if op == Adasum:
        raise HorovodUnsupportedError(f"op=hvd.Adasum is not supported: {UNSUPPORTED['Adasum']}.")
    if op not in WIRE:
        raise ValueError(f"unknown reduction op {op!r}; use hvd.Average, hvd.Sum, hvd.Min, hvd.Max or hvd.Product")
    return ReduceOp(op)


def op_text(op: ReduceOp, pre: float = 1.0, post: float = 1.0) -> str:
    scaled = "" if pre == post == 1.0 else f", prescale {pre:g}, postscale {post:g}"
    return f"op {op.name.capitalize()}{scaled}"


def scale_(tensor: torch.Tensor, factor: float) -> torch.Tensor:
    """Multiply in place; integer tensors are scaled in float64 and truncated toward zero, as Horovod's C++ does."""
    if factor != 1.0:
        if tensor.is_floating_point() or tensor.is_complex():
            tensor.mul_(factor)
        else:
            tensor.copy_((tensor.double() * factor).to(tensor.dtype))
    return tensor


def postscale_(tensor: torch.Tensor, op: ReduceOp, post: float, size: int) -> torch.Tensor:
    """After the sum: Average divides by the set's size (a true division for floating tensors, so that an average
    is correctly rounded whatever the size; integers are scaled by post/size in float64 and truncated, as Horovod's
    C++ does), then ``post`` multiplies."""
    if op == Average and (tensor.is_floating_point() or tensor.is_complex()):
        tensor.div_(size)
    elif op == Average:
        post = post / size
    return scale_(tensor, post)


def check_tensor(tensor: Any) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")


def reduce_request(kind: int, tensors: list[torch.Tensor], wire: torch.Tensor | None, op: ReduceOp, pre: float,
                   post: float, name: str | None) -> Request:
    """What every rank must agree on for a reduction of ``tensors`` (on the wire: the flat buffer ``wire``, or
    several, which a rank inside join() cannot serve)."""
    signature = (tuple(tuple(t.shape) for t in tensors), tuple(str(t.dtype) for t in tensors), int(op), pre, post,
                 tuple(t.is_cuda for t in tensors))
    sides = ", ".join(describe(t) for t in tensors)
    fields = wire_fields(wire, WIRE[op]) if wire is not None else (0, 0, 0, 0)
    return Request(kind, name, signature, f"{sides}, {op_text(op, pre, post)}", fields)


def raw_allreduce(wire: torch.Tensor, op: ReduceOp, pre: float, post: float, channel: Channel,
                  group: Any = None) -> tuple[dist.Work, Callable[[], torch.Tensor]]:
    """The data collective alone, once agreed: prescale, start the all_reduce (on the channel's group, or
    ``group``); (work, finish: postscale)."""
    scale_(wire, pre)
    work = dist.all_reduce(wire, op=WIRE_OPS[WIRE[op]], group=group or channel.group, async_op=True)
    assert work is not None
    return work, lambda: postscale_(wire, op, post, channel.size)


def start_allreduce(tensor: torch.Tensor, op: ReduceOp, pre: float = 1.0, post: float = 1.0, *,
                    name: str | None = None, process_set: Any = None, wait: bool = False,
                    channel: Channel | None = None) -> Handle:
    """Reduce ``tensor`` in place once every rank agrees: prescale, all_reduce, postscale (Average: 1/size too).

    Integer averages truncate toward zero like Horovod's; int16 travels as int32 (see ``_wire``).
    """
    if not tensor.is_contiguous():
        raise ValueError("Tensor is required to be contiguous.")
    channel = channel or resolve(process_set, "allreduce")
    wire = for_reduction(tensor)

    def launch(rows: Rows | None) -> tuple[list[dist.Work], Any]:
        if wire is not tensor:
            wire.copy_(tensor)
        work, reduced = raw_allreduce(wire, op, pre, post, channel)
        return [work], lambda: tensor if reduced() is tensor else tensor.copy_(wire)
    request = reduce_request(ALLREDUCE, [tensor], wire, op, pre, post, name)
    return channel.submit(Handle(request, launch, channel), wait)


def allreduce_async_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None, op: Any = None,
                     prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                     process_set: Any = None) -> Handle:
    """Start an in-place allreduce; ``synchronize(handle)`` returns ``tensor`` holding the result."""
    check_initialized()
    check_tensor(tensor)
    return start_allreduce(tensor, resolve_op(op, average), prescale_factor, postscale_factor, name=name,
                           process_set=process_set)


def allreduce_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None, op: Any = None,
               prescale_factor: float = 1.0, postscale_factor: float = 1.0, process_set: Any = None) -> torch.Tensor:
    """In-place allreduce (default op Average); returns ``tensor``."""
    check_initialized()
    check_tensor(tensor)
    return start_allreduce(tensor, resolve_op(op, average), prescale_factor, postscale_factor, name=name,
                           process_set=process_set, wait=True).wait()


def allreduce_async(tensor: torch.Tensor, average: bool | None = None, name: str | None = None, op: Any = None,
                    prescale_factor: float = 1.0, postscale_factor: float = 1.0, process_set: Any = None) -> Handle:
    """Start an allreduce into a new tensor; ``tensor`` is not modified."""
    check_initialized()
    check_tensor(tensor)
    out = tensor.detach().clone(memory_format=torch.contiguous_format)
    return start_allreduce(out, resolve_op(op, average), prescale_factor, postscale_factor, name=name,
                           process_set=process_set)


class _Allreduce(torch.autograd.Function):
    """Differentiable allreduce: the gradient is the allreduce of the output gradient with the same op, as Horovod."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, op: ReduceOp, pre: float, post: float, name: str | None,
                process_set: Any) -> torch.Tensor:
        ctx.op, ctx.pre, ctx.post, ctx.process_set = op, pre, post, process_set
        out = tensor.detach().clone(memory_format=torch.contiguous_format)
        result: torch.Tensor = start_allreduce(out, op, pre, post, name=name, process_set=process_set,
                                               wait=True).wait()
        return result

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        return (allreduce(grad, op=ctx.op, prescale_factor=ctx.pre, postscale_factor=ctx.post,
                          process_set=ctx.process_set), None, None, None, None, None)


def allreduce(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
              compression: type[Compressor] = Compression.none, op: Any = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0, process_set: Any = None) -> torch.Tensor:
    """Reduce ``tensor`` over the ranks (of ``process_set``) into a new tensor (default op Average; differentiable).

    Average divides the sum by the set's size; on integer tensors the quotient is truncated toward zero (Horovod
    scales the integer sum by 1/size in float64 and casts back). ``compression`` applies to what travels: with
    ``Compression.fp16`` a float32 tensor is summed as float16 and comes back as float32.
    """
    check_initialized()
    check_tensor(tensor)
    reduce_op = resolve_op(op, average)
    wire, ctx = compression.compress(tensor)
    if torch.is_grad_enabled() and wire.requires_grad:
        out: torch.Tensor = _Allreduce.apply(  # type: ignore[no-untyped-call]
            wire, reduce_op, prescale_factor, postscale_factor, name, process_set)
    else:
        out = start_allreduce(wire.detach().clone(memory_format=torch.contiguous_format), reduce_op,
                              prescale_factor, postscale_factor, name=name, process_set=process_set,
                              wait=True).wait()
    return compression.decompress(out, ctx)


def barrier(process_set: Any = None) -> None:
    """Wait until every rank (of ``process_set``) gets here; a rank inside ``join()`` counts as arrived."""
    check_initialized()
    channel = resolve(process_set, "barrier")

    def launch(rows: Rows | None) -> tuple[list[dist.Work], Any]:
        if rows is None:  # not negotiated (JUPYTER_TORCHDIST_HOROVOD_JOIN=0): the round was not a barrier
            dist.barrier(group=channel.group)
        return [], lambda: None
    channel.submit(Handle(Request(BARRIER, None, (), ""), launch, channel), wait=True).wait()


def join(device: int = -1) -> int:
    """This rank is out of data: take part in the others' collectives with zeros until every rank has joined.

    ``device`` is the CUDA device for the zero tensors when the others reduce CUDA tensors (-1: the current one).
    Returns the rank that joined last (the highest such rank when several joined in the same round). While a rank
    is inside join(), the others' allreduces see zeros from it (an Average still divides by the full size) and
    their other collectives raise ``JoinedRankError``, as in Horovod.
    """
    check_initialized()
    if not join_protocol():
        raise RuntimeError(f"hvd.join() needs the collectives to be negotiated, which {JOIN_ENV}=0 turned off on "
                           "this rank; unset it on every rank (or give each rank the same amount of data).")
    return resolve(None, "join").join(device)
