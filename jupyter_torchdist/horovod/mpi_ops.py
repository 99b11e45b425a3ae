"""Every collective, as Horovod's ``mpi_ops`` has them: reduction ops and the allreduce family (with Horovod's scaling
and autograd semantics), barrier, grouped allreduce, allgather, broadcast, alltoall, reducescatter, and the
object collectives (cloudpickled) with sparse_allreduce_async.
"""
from __future__ import annotations

import enum
import math
import warnings
from collections.abc import Callable
from typing import Any

import cloudpickle
import torch
import torch.distributed as dist

from .basics import JOIN_ENV, check_initialized, control_device, join_protocol, resolve
from .compression import Compression, Compressor
from .errors import UNSUPPORTED, HorovodInternalError, HorovodUnsupportedError
from .negotiation import (
    ALLGATHER,
    ALLREDUCE,
    ALLTOALL,
    BARRIER,
    BROADCAST,
    REDUCESCATTER,
    WIRE_OPS,
    Channel,
    Handle,
    Request,
    Rows,
    all_gather_single,
    describe,
    for_reduction,
    movable,
    reduce_dtype,
    reduce_scatter_single,
    wire_fields,
)

__all__ = ["ReduceOp", "Average", "Sum", "Adasum", "Min", "Max", "Product", "WIRE", "resolve_op", "scale_",
           "op_text", "postscale_", "reduce_request", "raw_allreduce", "start_allreduce", "allreduce", "allreduce_",
           "allreduce_async", "allreduce_async_", "barrier", "join", "check_tensor", "grouped_allreduce",
           "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_", "check_group", "allgather",
           "allgather_async", "grouped_allgather", "grouped_allgather_async", "gather_flat", "start_gather",
           "broadcast", "broadcast_", "broadcast_async", "broadcast_async_", "alltoall", "alltoall_async",
           "reducescatter", "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async",
           "broadcast_object", "allgather_object", "sparse_allreduce_async"]


# -- ops --------------------------------------------------------------------------------------------------------------
# Reduction ops and the allreduce family (with Horovod's scaling and autograd semantics), and barrier.

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

    Integer averages truncate toward zero like Horovod's; int16 travels as int32 (see ``negotiation``).
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


# -- grouped ----------------------------------------------------------------------------------------------------------
# grouped_allreduce: a list of tensors reduced by one negotiated collective, in one flat buffer per dtype.
#
# The results equal the single allreduces' (the same sums, the same scaling); a list of one dtype is one all_reduce.

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


def _start_grouped(tensors: list[torch.Tensor], op: ReduceOp, pre: float, post: float, name: str | None,
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
    return _start_grouped(tensors, resolve_op(op, average), prescale_factor, postscale_factor, name, process_set, False)


def grouped_allreduce_(tensors: list[torch.Tensor], average: bool | None = None, name: str | None = None,
                       op: Any = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                       process_set: Any = None) -> list[torch.Tensor]:
    """Reduce every tensor in place, in one collective; returns the list."""
    check_initialized()
    tensors = check_group(tensors, "grouped_allreduce_")
    return _start_grouped(tensors, resolve_op(op, average), prescale_factor, postscale_factor, name, process_set,
                          True).wait()


def grouped_allreduce_async(tensors: list[torch.Tensor], average: bool | None = None, name: str | None = None,
                            op: Any = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set: Any = None) -> Handle:
    """Start reducing copies of the tensors; ``synchronize`` returns the reduced copies."""
    check_initialized()
    copies = [t.detach().clone(memory_format=torch.contiguous_format)
              for t in check_group(tensors, "grouped_allreduce")]
    return _start_grouped(copies, resolve_op(op, average), prescale_factor, postscale_factor, name, process_set, False)


class _GroupedAllreduce(torch.autograd.Function):
    """Differentiable grouped allreduce: each gradient is reduced with the same op and factors (Horovod's rule)."""

    @staticmethod
    def forward(ctx: Any, op: ReduceOp, pre: float, post: float, name: str | None, process_set: Any,
                *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.op, ctx.pre, ctx.post, ctx.process_set = op, pre, post, process_set
        copies = [t.detach().clone(memory_format=torch.contiguous_format) for t in tensors]
        return tuple(_start_grouped(copies, op, pre, post, name, process_set, True).wait())

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
        outs = _start_grouped(copies, reduce_op, prescale_factor, postscale_factor, name, process_set, True).wait()
    return [compression.decompress(o, c) for o, c in zip(outs, ctxs)]


# -- allgather --------------------------------------------------------------------------------------------------------
# allgather and grouped_allgather (first dimensions may differ between ranks), differentiable.
#
# Each rank's first dimension travels in its control message (``Request.aux``), so an allgather is one negotiated
# all_gather of buffers padded to the longest rank; a group gathers each rank's tensors in one buffer per dtype
# (after exchanging the first dimensions, which do not fit in a control message).

def _request(tensors: list[torch.Tensor], name: str | None) -> Request:
    """What must agree: dtypes, ranks and all but the first dimensions (``aux``: a single tensor's first dim)."""
    signature = tuple((str(t.dtype), t.dim(), tuple(t.shape[1:]), t.is_cuda) for t in tensors)
    aux = tensors[0].shape[0] if len(tensors) == 1 and tensors[0].dim() else 0
    return Request(ALLGATHER, name, signature, ", ".join(describe(t) for t in tensors), aux=aux)


def gather_flat(flat: torch.Tensor, counts: list[int], channel: Channel) -> tuple[dist.Work, Callable[[], list]]:
    """Start gathering every rank's 1-D ``flat`` (rank r sends ``counts[r]`` elements): (work, parts by rank)."""
    longest = max(counts)
    send = movable(flat)
    if flat.numel() < longest:
        send = torch.cat([send, send.new_zeros(longest - flat.numel())])
    out = send.new_empty(longest * channel.size)
    work = all_gather_single(out, send, group=channel.group, async_op=True)
    assert work is not None
    return work, lambda: [out.view(flat.dtype)[r * longest:r * longest + n] for r, n in enumerate(counts)]


def _first_dims(tensors: list[torch.Tensor], rows: Rows | None, channel: Channel) -> list[list[int]]:
    """Every rank's first dimensions: from the round (one tensor), else exchanged once every rank agreed."""
    if rows is not None and len(tensors) == 1:
        return [[row[7] if row is not None else 0] for row in rows]
    mine = torch.tensor([t.shape[0] for t in tensors], dtype=torch.int64, device=tensors[0].device)
    out = mine.new_empty(channel.size * len(tensors))
    all_gather_single(out, mine, group=channel.group)
    return out.view(channel.size, len(tensors)).tolist()


def _assemble(tensors: list[torch.Tensor], dims: list[list[int]], idx: list[int], parts: list[torch.Tensor],
              out: list[Any]) -> None:
    """Cut every rank's part of one dtype back into tensors and concatenate each tensor's rows in rank order."""
    row_sizes = [math.prod(tensors[i].shape[1:]) for i in idx]
    pieces: list[list[torch.Tensor]] = [[] for _ in idx]
    for r, part in enumerate(parts):
        for k, piece in enumerate(part.split_with_sizes([dims[r][i] * size for i, size in zip(idx, row_sizes)])):
            pieces[k].append(piece.view(-1, *tensors[idx[k]].shape[1:]))
    for k, i in enumerate(idx):
        out[i] = torch.cat(pieces[k])


def start_gather(tensors: list[torch.Tensor], name: str | None, process_set: Any, wait: bool, what: str,
                 shape: Callable[[list[torch.Tensor], list[list[int]]], Any]) -> Handle:
    """Gather each of ``tensors`` from every rank (concatenated along dim 0 in rank order); the handle's result is
    ``shape(gathered, first dims by rank)``."""
    channel = resolve(process_set, what)

    def launch(rows: Rows | None) -> tuple[list[dist.Work], Any]:
        if any(t.dim() == 0 for t in tensors):
            raise ValueError(f"{what} of a 0-dimensional tensor: every rank must send at least one dimension "
                             "(reshape(1) it)")
        dims = _first_dims(tensors, rows, channel)
        works, pending = [], []
        for dtype in dict.fromkeys(t.dtype for t in tensors):
            idx = [i for i, t in enumerate(tensors) if t.dtype == dtype]
            flat = torch.cat([tensors[i].detach().reshape(-1) for i in idx])
            counts = [sum(d[i] * math.prod(tensors[i].shape[1:]) for i in idx) for d in dims]
            work, parts = gather_flat(flat, counts, channel)
            works.append(work)
            pending.append((idx, parts))

        def finish() -> Any:
            out: list[Any] = [None] * len(tensors)
            for idx, parts in pending:
                _assemble(tensors, dims, idx, parts(), out)
            return shape(out, dims)
        return works, finish
    return channel.submit(Handle(_request(tensors, name), launch, channel), wait)


def allgather_async(tensor: torch.Tensor, name: str | None = None, process_set: Any = None) -> Handle:
    """Start concatenating every rank's tensor along dim 0 (first dims may differ)."""
    check_initialized()
    check_tensor(tensor)
    return start_gather([tensor], name, process_set, False, "allgather", lambda out, dims: out[0])


def grouped_allgather_async(tensors: list[torch.Tensor], name: str | None = None, process_set: Any = None) -> Handle:
    """Start gathering a list of tensors in one collective; ``synchronize`` gives the list of results."""
    check_initialized()
    tensors = check_group(tensors, "grouped_allgather")
    return start_gather(tensors, name, process_set, False, "grouped_allgather", lambda out, dims: out)


def _offsets(dims: list[list[int]], rank: int) -> list[int]:
    """Where this rank's rows start in each gathered tensor."""
    return [sum(d[i] for d in dims[:rank]) for i in range(len(dims[0]))]


class _GroupedAllgather(torch.autograd.Function):
    """Differentiable (grouped) allgather; as in Horovod each gradient is this rank's slice of the averaged output
    gradient."""

    @staticmethod
    def forward(ctx: Any, name: str | None, process_set: Any, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        channel = resolve(process_set, "allgather")
        out, dims = start_gather(list(tensors), name, process_set, True, "allgather",
                                 lambda out, dims: (out, dims)).wait()
        ctx.process_set, ctx.lengths = process_set, [t.shape[0] for t in tensors]
        ctx.offsets = _offsets(dims, channel.rank)
        return tuple(out)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        if len(grads) == 1:
            reduced = [allreduce(grads[0], op=Average, process_set=ctx.process_set)]
        else:
            reduced = grouped_allreduce(list(grads), op=Average, process_set=ctx.process_set)
        return (None, None, *(r.narrow(0, o, n) for r, o, n in zip(reduced, ctx.offsets, ctx.lengths)))


def _gather(tensors: list[torch.Tensor], name: str | None, process_set: Any, what: str) -> list[torch.Tensor]:
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return list(_GroupedAllgather.apply(name, process_set, *tensors))  # type: ignore[no-untyped-call]
    return start_gather(tensors, name, process_set, True, what, lambda out, dims: out).wait()


def allgather(tensor: torch.Tensor, name: str | None = None, process_set: Any = None) -> torch.Tensor:
    """Concatenate every rank's tensor along dim 0, in rank order; first dims may differ, the rest must match."""
    check_initialized()
    check_tensor(tensor)
    return _gather([tensor], name, process_set, "allgather")[0]


def grouped_allgather(tensors: list[torch.Tensor], name: str | None = None,
                      process_set: Any = None) -> list[torch.Tensor]:
    """``allgather`` of each tensor, in one collective (differentiable)."""
    check_initialized()
    return _gather(check_group(tensors, "grouped_allgather"), name, process_set, "grouped_allgather")


# -- broadcast --------------------------------------------------------------------------------------------------------
# broadcast, in place and into a new tensor, differentiable; the root is a global rank, as in Horovod.

def _start_broadcast(tensor: torch.Tensor, root_rank: int, name: str | None, process_set: Any, wait: bool) -> Handle:
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
    return _start_broadcast(tensor, root_rank, name, process_set, False)


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: Any = None) -> Handle:
    """Start a broadcast into a new tensor; ``tensor`` is not modified."""
    check_initialized()
    check_tensor(tensor)
    return _start_broadcast(tensor.detach().clone(memory_format=torch.contiguous_format), root_rank, name, process_set,
                            False)


def broadcast_(tensor: torch.Tensor, root_rank: int, name: str | None = None, process_set: Any = None) -> torch.Tensor:
    """Overwrite ``tensor`` in place with rank ``root_rank``'s; returns it."""
    check_initialized()
    check_tensor(tensor)
    result: torch.Tensor = _start_broadcast(tensor, root_rank, name, process_set, True).wait()
    return result


class _Broadcast(torch.autograd.Function):
    """Differentiable broadcast: the root gets the averaged gradient, the other ranks zero (Horovod's rule)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, root_rank: int, name: str | None, process_set: Any) -> torch.Tensor:
        ctx.root_rank, ctx.process_set = root_rank, process_set
        copy = tensor.detach().clone(memory_format=torch.contiguous_format)
        result: torch.Tensor = _start_broadcast(copy, root_rank, name, process_set, True).wait()
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
    result: torch.Tensor = _start_broadcast(copy, root_rank, name, process_set, True).wait()
    return result


# -- alltoall ---------------------------------------------------------------------------------------------------------
# alltoall, with or without ``splits``, differentiable (Horovod >= 0.23's return values).

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


def _start_alltoall(tensor: torch.Tensor, splits: Any, name: str | None, process_set: Any, wait: bool,
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
    return _start_alltoall(tensor, splits, name, process_set, False, splits is not None)


class _Alltoall(torch.autograd.Function):
    """Differentiable alltoall: the gradient goes back along the received splits (Horovod's rule)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, splits: Any, name: str | None, process_set: Any) -> Any:
        out, received = _start_alltoall(tensor, splits, name, process_set, True, True).wait()
        ctx.received, ctx.process_set = received.tolist(), process_set
        if splits is None:
            return out
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *unused: Any) -> tuple[Any, ...]:
        back = _start_alltoall(grad.contiguous(), ctx.received, None, ctx.process_set, True, False).wait()
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
    return _start_alltoall(tensor, splits, name, process_set, True, splits is not None).wait()


# -- reducescatter ----------------------------------------------------------------------------------------------------
# reducescatter and grouped_reducescatter: reduce over the ranks, each rank keeping its rows of dim 0.
#
# As in Horovod, rank r of n keeps ``d // n`` rows of a first dimension ``d``, one more when ``r < d % n``; the ops
# are Average (default) and Sum, with pre/postscale factors, integer averages truncated toward zero. One
# ``reduce_scatter_tensor`` per call (per dtype for a group): each rank's chunk is the rows it keeps, of every tensor,
# padded to the longest chunk when the rows do not divide evenly. Gradients follow Horovod's rule: an allgather of
# the output gradient, times the set's size for Sum, times the scale factors.

def _rows(first: int, n: int) -> list[int]:
    return [first // n + (1 if r < first % n else 0) for r in range(n)]


def _chunks(tensors: list[torch.Tensor], n: int, dtype: torch.dtype) -> tuple[torch.Tensor, int]:
    """Every rank's chunk (its rows of every tensor, flattened), padded to the longest: (buffer, chunk length)."""
    per_rank: list[list[torch.Tensor]] = [[] for _ in range(n)]
    for t in tensors:
        for r, part in enumerate(t.detach().split_with_sizes(_rows(t.shape[0], n))):
            per_rank[r].append(part.reshape(-1).to(dtype))
    sizes = [sum(p.numel() for p in parts) for parts in per_rank]
    longest = max(sizes)
    buffer = tensors[0].new_zeros(n * longest, dtype=dtype)
    for r, parts in enumerate(per_rank):
        if parts:
            torch.cat(parts, out=buffer[r * longest:r * longest + sizes[r]])
    return buffer, longest


def _check_op(op: ReduceOp) -> None:
    if op not in (Average, Sum):
        raise HorovodInternalError("Reducescatter currently only supports Average and Sum (got "
                                   f"{op.name.capitalize()}); use allreduce for Min, Max or Product.")


def _launch(tensors: list[torch.Tensor], op: ReduceOp, pre: float, post: float,
            channel: Channel) -> tuple[list[dist.Work], Any]:
    if any(t.dim() == 0 for t in tensors):
        raise ValueError("reducescatter of a 0-dimensional tensor: every rank must send at least one dimension")
    n, me = channel.size, channel.rank
    works, pending = [], []
    for dtype in dict.fromkeys(t.dtype for t in tensors):
        idx = [i for i, t in enumerate(tensors) if t.dtype == dtype]
        buffer, longest = _chunks([tensors[i] for i in idx], n, reduce_dtype(dtype))
        scale_(buffer, pre)
        out = buffer.new_empty(longest)
        works.append(reduce_scatter_single(out, buffer, group=channel.group, async_op=True))
        pending.append((idx, out))

    def finish() -> list[torch.Tensor]:
        results: list[Any] = [None] * len(tensors)
        for idx, out in pending:
            mine = [_rows(tensors[i].shape[0], n)[me] for i in idx]
            sizes = [m * math.prod(tensors[i].shape[1:]) for i, m in zip(idx, mine)]
            parts = postscale_(out[:sum(sizes)], op, post, n).split_with_sizes(sizes)
            for i, m, part in zip(idx, mine, parts):
                results[i] = part.to(tensors[i].dtype).view(m, *tensors[i].shape[1:])
        return results
    return works, finish


def _start_reducescatter(tensors: list[torch.Tensor], op: ReduceOp, pre: float, post: float, name: str | None,
                         process_set: Any, wait: bool, what: str, single: bool = False) -> Handle:
    """Negotiate, then reduce-scatter; the handle's result is the list of outputs (``single``: the only one)."""
    _check_op(op)
    channel = resolve(process_set, what)

    def launch(rows: Rows | None) -> tuple[list[dist.Work], Any]:
        works, finish = _launch(tensors, op, pre, post, channel)
        return works, (lambda: finish()[0]) if single else finish
    request = reduce_request(REDUCESCATTER, tensors, None, op, pre, post, name)
    return channel.submit(Handle(request, launch, channel), wait)


def reducescatter_async(tensor: torch.Tensor, name: str | None = None, op: Any = Average, process_set: Any = None,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> Handle:
    """Start a reducescatter; ``synchronize`` gives this rank's rows of the reduction."""
    check_initialized()
    check_tensor(tensor)
    return _start_reducescatter([tensor], resolve_op(op, None), prescale_factor, postscale_factor, name, process_set,
                                False, "reducescatter", single=True)


def grouped_reducescatter_async(tensors: list[torch.Tensor], name: str | None = None, op: Any = Average,
                                process_set: Any = None, prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0) -> Handle:
    """Start a reducescatter of each tensor, in one collective; ``synchronize`` gives the list."""
    check_initialized()
    return _start_reducescatter(check_group(tensors, "grouped_reducescatter"), resolve_op(op, None), prescale_factor,
                                postscale_factor, name, process_set, False, "grouped_reducescatter")


class _Reducescatter(torch.autograd.Function):
    """Differentiable (grouped) reducescatter, with Horovod's gradient (see the module docstring)."""

    @staticmethod
    def forward(ctx: Any, op: ReduceOp, pre: float, post: float, name: str | None, process_set: Any,
                *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.factor = pre * post * (resolve(process_set, "reducescatter").size if op == Sum else 1)
        ctx.process_set = process_set
        started = _start_reducescatter(list(tensors), op, pre, post, name, process_set, True, "reducescatter")
        return tuple(started.wait())

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:

        scaled = [g * ctx.factor if ctx.factor != 1 else g for g in grads]
        return (None, None, None, None, None, *grouped_allgather(scaled, process_set=ctx.process_set))


def _reducescatter(tensors: list[torch.Tensor], name: str | None, compression: type[Compressor], op: Any,
                   process_set: Any, pre: float, post: float, what: str) -> list[torch.Tensor]:
    reduce_op = resolve_op(op, None)
    wires, ctxs = zip(*(compression.compress(t) for t in tensors))
    if torch.is_grad_enabled() and any(w.requires_grad for w in wires):
        outs = _Reducescatter.apply(reduce_op, pre, post, name, process_set, *wires)  # type: ignore[no-untyped-call]
    else:
        outs = _start_reducescatter(list(wires), reduce_op, pre, post, name, process_set, True, what).wait()
    return [compression.decompress(o, c) for o, c in zip(outs, ctxs)]


def reducescatter(tensor: torch.Tensor, name: str | None = None, compression: type[Compressor] = Compression.none,
                  op: Any = Average, process_set: Any = None, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> torch.Tensor:
    """Reduce ``tensor`` over the ranks and keep this rank's rows of dim 0 (default op Average; differentiable)."""
    check_initialized()
    check_tensor(tensor)
    return _reducescatter([tensor], name, compression, op, process_set, prescale_factor, postscale_factor,
                          "reducescatter")[0]


def grouped_reducescatter(tensors: list[torch.Tensor], name: str | None = None,
                          compression: type[Compressor] = Compression.none, op: Any = Average,
                          process_set: Any = None, prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> list[torch.Tensor]:
    """``reducescatter`` of each tensor, in one collective (differentiable)."""
    check_initialized()
    return _reducescatter(check_group(tensors, "grouped_reducescatter"), name, compression, op, process_set,
                          prescale_factor, postscale_factor, "grouped_reducescatter")


# -- objects ----------------------------------------------------------------------------------------------------------
# broadcast_object, allgather_object (cloudpickled, as in Horovod) and sparse_allreduce_async.

def broadcast_object(obj: Any, root_rank: int = 0, name: str | None = None, process_set: Any = None) -> Any:
    """Rank ``root_rank``'s object on every rank: its length, then its bytes (two broadcasts)."""
    check_initialized()
    device = control_device()
    root = torch.distributed.get_rank() == root_rank
    payload = bytearray(cloudpickle.dumps(obj)) if root else bytearray()
    sz, t = (None, None) if name is None else (f"{name}.sz", f"{name}.t")
    length = broadcast_(torch.tensor([len(payload)], dtype=torch.int64, device=device), root_rank, sz, process_set)
    if root:
        data = torch.frombuffer(payload, dtype=torch.uint8).to(device)
    else:
        data = torch.empty(int(length[0]), dtype=torch.uint8, device=device)
    broadcast_(data, root_rank, t, process_set)
    return obj if root else cloudpickle.loads(data.cpu().numpy().tobytes())


def allgather_object(obj: Any, name: str | None = None, process_set: Any = None) -> list[Any]:
    """Every rank's object (of ``process_set``), in rank order: one allgather of the pickled bytes."""
    check_initialized()
    payload = bytearray(cloudpickle.dumps(obj))
    data = torch.frombuffer(payload, dtype=torch.uint8).to(control_device())
    parts = start_gather([data], name, process_set, True, "allgather_object",
                         lambda out, dims: [out[0][sum(d[0] for d in dims[:r]):][:dims[r][0]]
                                            for r in range(len(dims))]).wait()
    return [cloudpickle.loads(p.cpu().numpy().tobytes()) for p in parts]


def sparse_allreduce_async(tensor: torch.Tensor, name: str, op: Any, process_set: Any = None) -> Callable[[], Any]:
    """Start reducing a sparse tensor by gathering every rank's indices and values (two allgathers); the returned
    function gives the result: a sparse tensor holding every rank's entries (uncoalesced: duplicates add up),
    the values divided by the set's size for Average."""
    check_initialized()
    reduce_op = resolve_op(op, None)
    size = resolve(process_set, "sparse_allreduce_async").size
    t = tensor.coalesce() if not tensor.is_coalesced() else tensor
    indices = allgather_async(t.indices().transpose(0, 1).contiguous(), name=f"{name}.indices",
                              process_set=process_set)
    values = allgather_async(t.values().contiguous(), name=f"{name}.values", process_set=process_set)

    def result() -> torch.Tensor:
        gathered_values = values.wait()
        gathered_indices = indices.wait()
        if reduce_op == Average:
            gathered_values = gathered_values / size
        return torch.sparse_coo_tensor(gathered_indices.transpose(0, 1), gathered_values, t.size())
    return result
