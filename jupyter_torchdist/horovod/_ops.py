"""Reduction ops, handles, and the allreduce family (with Horovod's scaling and autograd semantics)."""
from __future__ import annotations

import enum
import warnings
from typing import Any, Callable

import torch
import torch.distributed as dist

from ._basics import check_initialized, check_process_set, join_protocol
from ._compression import Compression, Compressor
from ._control import BARRIER, WIRE_OPS, announce, require_all
from ._errors import UNSUPPORTED, HorovodUnsupportedError

__all__ = ["ReduceOp", "Average", "Sum", "Adasum", "Min", "Max", "Product", "Handle", "resolve_op", "start_allreduce",
           "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "synchronize", "poll", "barrier"]


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
_WIRE = {Average: 0, Sum: 0, Min: 1, Max: 2, Product: 3}  # index into _control.WIRE_OPS: Average is a scaled SUM


class Handle:
    """What the ``*_async`` calls return: give it to ``synchronize()`` for the result or ``poll()`` to test it."""

    __slots__ = ("_works", "_finish", "_done", "_result")

    def __init__(self, works: list[dist.Work], finish: Callable[[], Any]) -> None:
        self._works = works
        self._finish: Callable[[], Any] | None = finish
        self._done = False
        self._result: Any = None

    def poll(self) -> bool:
        """True once the communication is over (``wait()`` will not block)."""
        return self._done or all(work.is_completed() for work in self._works)

    def wait(self) -> Any:
        """Block until done and return the result; later calls return the same result."""
        if not self._done:
            for work in self._works:
                work.wait()
            assert self._finish is not None
            self._result, self._finish, self._works, self._done = self._finish(), None, [], True
        return self._result


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
    if op not in _WIRE:
        raise ValueError(f"unknown reduction op {op!r}; use hvd.Average, hvd.Sum, hvd.Min, hvd.Max or hvd.Product")
    return ReduceOp(op)


def scale_(tensor: torch.Tensor, factor: float) -> torch.Tensor:
    """Multiply in place; integer tensors are scaled in float64 and truncated toward zero, as Horovod's C++ does."""
    if factor != 1.0:
        if tensor.is_floating_point() or tensor.is_complex():
            tensor.mul_(factor)
        else:
            tensor.copy_((tensor.double() * factor).to(tensor.dtype))
    return tensor


def start_allreduce(tensor: torch.Tensor, op: ReduceOp, prescale: float = 1.0, postscale: float = 1.0, *,
                    announced: bool = False) -> Handle:
    """Reduce ``tensor`` in place, asynchronously: prescale, announce (join protocol), all_reduce, then postscale.

    Average is a SUM followed by a postscale of 1/size, so integer averages truncate toward zero like Horovod's.
    ``announced``: the caller announced it already (a DistributedOptimizer announces a round of buckets at once).
    """
    if not tensor.is_contiguous():
        raise ValueError("Tensor is required to be contiguous.")
    if op == Average:
        postscale = postscale / dist.get_world_size()
    scale_(tensor, prescale)
    wire = _WIRE[op]
    works = [announce(tensor, wire)] if join_protocol() and not announced else []
    work = dist.all_reduce(tensor, op=WIRE_OPS[wire], async_op=True)
    assert work is not None
    return Handle([*works, work], lambda: scale_(tensor, postscale))


def _check(process_set: Any, tensor: Any) -> None:
    check_initialized()
    check_process_set(process_set)
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")


def allreduce_async_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None, op: Any = None,
                     prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                     process_set: Any = None) -> Handle:
    """Start an in-place allreduce; ``synchronize(handle)`` returns ``tensor`` holding the result."""
    _check(process_set, tensor)
    return start_allreduce(tensor, resolve_op(op, average), prescale_factor, postscale_factor)


def allreduce_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None, op: Any = None,
               prescale_factor: float = 1.0, postscale_factor: float = 1.0, process_set: Any = None) -> torch.Tensor:
    """In-place allreduce (default op Average); returns ``tensor``."""
    _check(process_set, tensor)
    return start_allreduce(tensor, resolve_op(op, average), prescale_factor, postscale_factor).wait()


def allreduce_async(tensor: torch.Tensor, average: bool | None = None, name: str | None = None, op: Any = None,
                    prescale_factor: float = 1.0, postscale_factor: float = 1.0, process_set: Any = None) -> Handle:
    """Start an allreduce into a new tensor; ``tensor`` is not modified."""
    _check(process_set, tensor)
    out = tensor.detach().clone(memory_format=torch.contiguous_format)
    return start_allreduce(out, resolve_op(op, average), prescale_factor, postscale_factor)


class _Allreduce(torch.autograd.Function):
    """Differentiable allreduce: the gradient is the allreduce of the output gradient with the same op, as Horovod."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, op: ReduceOp, pre: float, post: float) -> torch.Tensor:
        ctx.op, ctx.pre, ctx.post = op, pre, post
        out = tensor.detach().clone(memory_format=torch.contiguous_format)
        result: torch.Tensor = start_allreduce(out, op, pre, post).wait()
        return result

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        return allreduce(grad, op=ctx.op, prescale_factor=ctx.pre, postscale_factor=ctx.post), None, None, None


def allreduce(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
              compression: type[Compressor] = Compression.none, op: Any = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0, process_set: Any = None) -> torch.Tensor:
    """Reduce ``tensor`` over all ranks into a new tensor (default op Average; differentiable).

    Average divides the sum by size(); on integer tensors the quotient is truncated toward zero (Horovod scales
    the integer sum by 1/size in float64 and casts back). ``compression`` applies to what travels: with
    ``Compression.fp16`` a float32 tensor is summed as float16 and comes back as float32.
    """
    _check(process_set, tensor)
    reduce_op = resolve_op(op, average)
    wire, ctx = compression.compress(tensor)
    if torch.is_grad_enabled() and wire.requires_grad:
        out: torch.Tensor = _Allreduce.apply(  # type: ignore[no-untyped-call]
            wire, reduce_op, prescale_factor, postscale_factor)
    else:
        out = allreduce_async(wire, op=reduce_op, prescale_factor=prescale_factor,
                              postscale_factor=postscale_factor).wait()
    return compression.decompress(out, ctx)


def synchronize(handle: Handle) -> Any:
    """Wait for an async operation and return its result (a tensor; (tensor, splits) for alltoall with splits)."""
    if not isinstance(handle, Handle):
        raise TypeError(f"synchronize() takes a handle from an *_async call, got {type(handle).__name__}")
    return handle.wait()


def poll(handle: Handle) -> bool:
    """True when the async operation is done."""
    if not isinstance(handle, Handle):
        raise TypeError(f"poll() takes a handle from an *_async call, got {type(handle).__name__}")
    return handle.poll()


def barrier(process_set: Any = None) -> None:
    """Wait until every rank gets here (a rank inside ``join()`` counts as arrived, as in Horovod)."""
    check_initialized()
    check_process_set(process_set)
    require_all(BARRIER)
