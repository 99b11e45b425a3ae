"""Gradient buckets for DistributedOptimizer: DDP's overlap of communication with the backward pass.

Parameters are cut into buckets in reverse order (roughly the order backward produces their gradients): a first
bucket of ~1 MB so communication starts early, then ~25 MB, as DDP does. A post-accumulate-grad hook per
parameter counts the backward passes; when a parameter's last expected pass has accumulated, its bucket's
count drops, and every bucket that is complete is copied into one flat buffer and started as an asynchronous
allreduce, strictly in bucket order so all ranks issue the same collectives in the same order. ``synchronize``
starts what is left (a parameter without a gradient contributes zeros, as in Horovod), waits, and writes the
averaged values back into ``.grad``.
"""
from __future__ import annotations

import threading
from typing import Any

import torch

from ._basics import join_protocol
from ._compression import Compressor
from ._control import announce_round, register_round
from ._errors import HorovodUnsupportedError
from ._ops import Average, Handle, ReduceOp, start_allreduce

__all__ = ["plan_buckets", "Reducer"]

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


class _Bucket:
    __slots__ = ("params", "sizes", "buffer", "pending", "handle", "ctx")

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.params = params
        self.sizes = [p.numel() for p in params]
        self.buffer = params[0].new_empty(sum(self.sizes))
        self.pending = len(params)
        self.handle: Handle | None = None
        self.ctx: Any = None


class Reducer:
    """Owns the hooks and buckets of one DistributedOptimizer."""

    def __init__(self, layout: list[list[torch.Tensor]], compression: type[Compressor], op: ReduceOp,
                 predivide: float, sparse_as_dense: bool, passes: int) -> None:
        self.buckets = [_Bucket(b) for b in layout]
        self._where = {id(p): i for i, b in enumerate(layout) for p in b}
        self.compression, self.op, self.sparse_as_dense, self.predivide = compression, op, sparse_as_dense, predivide
        self.scale = (1.0 / predivide, predivide) if op == Average else (1.0, 1.0)
        self.passes = passes
        self._left = {key: passes for key in self._where}
        self._next = 0  # the next bucket to start; buckets start in order
        self._lock = threading.Lock()
        self._hooks = [p.register_post_accumulate_grad_hook(self._ready)  # type: ignore[no-untyped-call]
                       for b in layout for p in b]
        self._round = register_round(self._replay)
        self._announce: Any = None  # this round's control message (join protocol), sent with its first bucket

    def rebuilt(self, layout: list[list[torch.Tensor]]) -> Reducer:
        """A reducer with the same options over a new layout; this one's hooks are removed."""
        self.remove_hooks()
        return Reducer(layout, self.compression, self.op, self.predivide, self.sparse_as_dense, self.passes)

    def set_passes(self, passes: int) -> None:
        self.passes = passes
        self.reset()

    def in_progress(self) -> bool:
        """True between the first counted backward pass and the end of ``synchronize``."""
        return self._next > 0 or any(left != self.passes for left in self._left.values())

    def reset(self) -> None:
        self._next, self._announce = 0, None
        self._left = {key: self.passes for key in self._where}
        for bucket in self.buckets:
            bucket.pending, bucket.handle, bucket.ctx = len(bucket.params), None, None

    def remove_hooks(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def _ready(self, param: torch.Tensor) -> None:
        """The post-accumulate-grad hook: count this pass; start every complete bucket in order."""
        with self._lock:
            left = self._left[id(param)] - 1
            if left < 0:
                raise AssertionError("Gradients were computed more than backward_passes_per_step times before call "
                                     "to step(). Increase backward_passes_per_step to accumulate gradients locally.")
            self._left[id(param)] = left
            if left == 0:
                self.buckets[self._where[id(param)]].pending -= 1
                while self._next < len(self.buckets) and self.buckets[self._next].pending <= 0:
                    self._start(self.buckets[self._next])
                    self._next += 1

    def _grad(self, p: torch.Tensor) -> torch.Tensor:
        if p.grad is None:  # this rank computed none, others may have: take part with zeros (Horovod does)
            p.grad = torch.zeros_like(p)
        if p.grad.is_sparse:
            if not self.sparse_as_dense:
                raise HorovodUnsupportedError("sparse gradients need DistributedOptimizer(..., sparse_as_dense=True) "
                                              "here (Horovod's allgather-based sparse allreduce is not provided).")
            return p.grad.to_dense().reshape(-1)
        return p.grad.reshape(-1)

    def _start(self, bucket: _Bucket) -> None:
        torch.cat([self._grad(p) for p in bucket.params], out=bucket.buffer)
        wire, bucket.ctx = self.compression.compress(bucket.buffer)
        if self._announce is None and join_protocol():
            self._announce = announce_round(self._round)  # one control message for every bucket of the round
        bucket.handle = start_allreduce(wire, self.op, *self.scale, announced=True)

    def _replay(self) -> None:
        """A rank inside join(): this optimizer's round, every bucket reduced with zeros (in the same order)."""
        for bucket in self.buckets:
            wire, _ = self.compression.compress(torch.zeros_like(bucket.buffer))
            start_allreduce(wire, self.op, announced=True).wait()

    def synchronize(self) -> None:
        """Start the buckets not started yet, wait for all, and write the reduced gradients into ``.grad``."""
        with self._lock:
            for bucket in self.buckets[self._next:]:
                self._start(bucket)
            self._next = len(self.buckets)
        try:
            if self._announce is not None:
                self._announce.wait()
            with torch.no_grad():
                for bucket in self.buckets:
                    assert bucket.handle is not None
                    reduced = self.compression.decompress(bucket.handle.wait(), bucket.ctx)
                    for p, part in zip(bucket.params, reduced.split_with_sizes(bucket.sizes)):
                        self._write(p, part.view_as(p))
        finally:
            self.reset()

    @staticmethod
    def _write(p: torch.Tensor, value: torch.Tensor) -> None:
        assert p.grad is not None
        if p.grad.is_sparse:
            p.grad = value.to_sparse()
        else:
            p.grad.copy_(value)
