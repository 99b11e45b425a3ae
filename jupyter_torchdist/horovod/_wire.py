"""What travels: every dtype Horovod supports on CPU through gloo, exactly, and the reductions on the wire.

gloo (and NCCL) have every dtype Horovod supports but int16 (uint8, int8, int16, int32, int64, float16, bfloat16,
float32, float64, bool). An int16 tensor is reduced as int32 and cast back: the low 16 bits of an int32 sum or
product are the int16 result with int16's wrap-around, and min/max are exact. Collectives that only move data
(broadcast, allgather, alltoall) carry it as a float16 view of the same bytes: gloo copies them, never computes.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["WIRE_OPS", "all_gather_single", "reduce_scatter_single", "reduce_dtype", "for_reduction", "movable"]

# torch 2.13 renamed all_gather_into_tensor and reduce_scatter_tensor (the old names warn); older torch has only those
all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
WIRE_OPS = (dist.ReduceOp.SUM, dist.ReduceOp.MIN, dist.ReduceOp.MAX, dist.ReduceOp.PRODUCT)
_REDUCE_AS = {torch.int16: torch.int32}
_MOVE_AS = {torch.int16: torch.float16}


def reduce_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a reduction of ``dtype`` runs in on the wire."""
    return _REDUCE_AS.get(dtype, dtype)


def for_reduction(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` itself, or a copy in the wider dtype gloo reduces (the caller casts the result back)."""
    wider = _REDUCE_AS.get(tensor.dtype)
    return tensor if wider is None else tensor.to(wider)


def movable(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` itself, or a same-size view gloo can copy (writes to the view write ``tensor``)."""
    other = _MOVE_AS.get(tensor.dtype)
    return tensor if other is None else tensor.view(other)
