"""reducescatter and grouped_reducescatter: reduce over the ranks, each rank keeping its rows of dim 0.

As in Horovod, rank r of n keeps ``d // n`` rows of a first dimension ``d``, one more when ``r < d % n``; the ops
are Average (default) and Sum, with pre/postscale factors, integer averages truncated toward zero. One
``reduce_scatter_tensor`` per call (per dtype for a group): each rank's chunk is the rows it keeps, of every tensor,
padded to the longest chunk when the rows do not divide evenly. Gradients follow Horovod's rule: an allgather of
the output gradient, times the set's size for Sum, times the scale factors.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist

from ._basics import check_initialized
from ._channel import Channel
from ._compression import Compression, Compressor
from ._errors import HorovodInternalError
from ._grouped import check_group
from ._handles import Handle, Rows
from ._ops import Average, ReduceOp, Sum, check_tensor, postscale_, reduce_request, resolve_op, scale_
from ._process_sets import resolve
from ._request import REDUCESCATTER
from ._wire import reduce_dtype, reduce_scatter_single

__all__ = ["reducescatter", "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async"]


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


def _start(tensors: list[torch.Tensor], op: ReduceOp, pre: float, post: float, name: str | None,
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
    return _start([tensor], resolve_op(op, None), prescale_factor, postscale_factor, name, process_set, False,
                  "reducescatter", single=True)


def grouped_reducescatter_async(tensors: list[torch.Tensor], name: str | None = None, op: Any = Average,
                                process_set: Any = None, prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0) -> Handle:
    """Start a reducescatter of each tensor, in one collective; ``synchronize`` gives the list."""
    check_initialized()
    return _start(check_group(tensors, "grouped_reducescatter"), resolve_op(op, None), prescale_factor,
                  postscale_factor, name, process_set, False, "grouped_reducescatter")


class _Reducescatter(torch.autograd.Function):
    """Differentiable (grouped) reducescatter, with Horovod's gradient (see the module docstring)."""

    @staticmethod
    def forward(ctx: Any, op: ReduceOp, pre: float, post: float, name: str | None, process_set: Any,
                *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.factor = pre * post * (resolve(process_set, "reducescatter").size if op == Sum else 1)
        ctx.process_set = process_set
        return tuple(_start(list(tensors), op, pre, post, name, process_set, True, "reducescatter").wait())

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        from ._allgather import grouped_allgather

        scaled = [g * ctx.factor if ctx.factor != 1 else g for g in grads]
        return (None, None, None, None, None, *grouped_allgather(scaled, process_set=ctx.process_set))


def _reducescatter(tensors: list[torch.Tensor], name: str | None, compression: type[Compressor], op: Any,
                   process_set: Any, pre: float, post: float, what: str) -> list[torch.Tensor]:
    reduce_op = resolve_op(op, None)
    wires, ctxs = zip(*(compression.compress(t) for t in tensors))
    if torch.is_grad_enabled() and any(w.requires_grad for w in wires):
        outs = _Reducescatter.apply(reduce_op, pre, post, name, process_set, *wires)  # type: ignore[no-untyped-call]
    else:
        outs = _start(list(wires), reduce_op, pre, post, name, process_set, True, what).wait()
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
