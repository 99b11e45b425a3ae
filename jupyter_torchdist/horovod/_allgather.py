"""allgather and grouped_allgather (first dimensions may differ between ranks), differentiable.

Each rank's first dimension travels in its control message (``Request.aux``), so an allgather is one negotiated
all_gather of buffers padded to the longest rank; a group gathers each rank's tensors in one buffer per dtype
(after exchanging the first dimensions, which do not fit in a control message).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ._basics import check_initialized
from ._channel import Channel
from ._grouped import check_group, grouped_allreduce
from ._handles import Handle, Rows
from ._ops import Average, allreduce, check_tensor
from ._process_sets import resolve
from ._request import ALLGATHER, Request, describe
from ._wire import all_gather_single, movable

__all__ = ["allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async", "gather_flat",
           "start_gather"]


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
