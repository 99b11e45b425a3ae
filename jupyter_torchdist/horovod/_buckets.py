"""The bucket layout of a DistributedOptimizer: which parameters' gradients travel together, in what order.

Parameters are cut into buckets in reverse order (roughly the order backward produces their gradients): a first
bucket of ~1 MB so communication starts early, then ~25 MB, as DDP does; or as Horovod's ``groups`` say. A bucket
is one flat buffer, so it never mixes devices or dtypes.
"""
from __future__ import annotations

from typing import Any

import torch

__all__ = ["plan_buckets", "Bucket"]

_FIRST_BUCKET_BYTES = 1 << 20
_BUCKET_BYTES = 25 << 20


def _split_list(items: list[torch.Tensor], n: int) -> list[list[torch.Tensor]]:
    """Horovod's split_list: n nearly equal consecutive parts."""
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


def _homogeneous(group: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """A group cut wherever device or dtype changes, since a bucket is one flat buffer."""
    parts: list[list[torch.Tensor]] = []
    for p in group:
        if not parts or (p.device, p.dtype) != (parts[-1][0].device, parts[-1][0].dtype):
            parts.append([])
        parts[-1].append(p)
    return parts


def _by_size(params: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    buckets: list[list[torch.Tensor]] = []
    filled = 0
    for p in reversed(params):
        cap = _FIRST_BUCKET_BYTES if len(buckets) == 1 else _BUCKET_BYTES
        last = buckets[-1][0] if buckets else None
        if last is None or (p.device, p.dtype) != (last.device, last.dtype) or filled + p.nbytes > cap:
            buckets.append([])
            filled = 0
        buckets[-1].append(p)
        filled += p.nbytes
    return buckets


def plan_buckets(params: list[torch.Tensor], groups: Any) -> list[list[torch.Tensor]]:
    """The bucket layout, in launch order: by size, or Horovod's ``groups`` (a count, or lists of parameters)."""
    if not groups:
        return _by_size(params)
    if isinstance(groups, int):
        chosen = [g for g in _split_list(params, groups) if g]
    else:
        named, known = {id(p) for group in groups for p in group}, {id(p) for p in params}
        chosen = [[p for p in group if id(p) in known] for group in groups]
        chosen = [g for g in chosen if g] + [[p] for p in params if id(p) not in named]
    position = {id(p): i for i, p in enumerate(params)}
    parts = [part for group in chosen for part in _homogeneous(group)]
    return sorted(parts, key=lambda part: -max(position[id(p)] for p in part))


class Bucket:
    """One bucket's parameters and flat buffer, and its allreduce once started."""

    __slots__ = ("params", "sizes", "buffer", "pending", "wire", "ctx", "work", "finish")

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.params = params
        self.sizes = [p.numel() for p in params]
        self.buffer = params[0].new_empty(sum(self.sizes))
        self.pending = len(params)  # parameters whose gradient is not final yet this step
        self.wire: torch.Tensor | None = None  # what travels, once the gradients are copied in
        self.ctx: Any = None
        self.work: Any = None
        self.finish: Any = None

    def reset(self) -> None:
        self.pending, self.wire, self.ctx, self.work, self.finish = len(self.params), None, None, None, None
