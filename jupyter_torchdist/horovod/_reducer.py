"""A DistributedOptimizer's gradient communication: DDP's overlap of the allreduces with the backward pass.

A post-accumulate-grad hook per parameter counts the backward passes; when a parameter's last expected pass has
accumulated, its bucket's count drops, and every bucket that is complete is copied into its flat buffer and started
as an asynchronous allreduce, in bucket order. ``synchronize`` starts what is left (a parameter without a gradient
contributes zeros, as in Horovod), waits, and writes the reduced values back into ``.grad``.

The first step of a layout is negotiated (``_channel``): its control round starts with the step's first final
gradient, and its buckets go out once every rank agreed, which gives a CPU layout a gloo group of its own
(``_layouts``); every later step's buckets go out on that group at once, with no control message (DDP's
traffic), while a rank inside ``join()`` contributes zeros there. CUDA layouts negotiate every step, their
buckets leaving on the set's group as soon as every rank agreed. Sparse gradients (``nn.Embedding(sparse=True)``)
are allgathered after the buckets, as Horovod's sparse allreduce does, unless ``sparse_as_dense=True``; their slot
in a bucket carries zeros.
"""
from __future__ import annotations

import threading
from typing import Any

import torch
import torch.distributed as dist

from ._buckets import Bucket
from ._channel import Channel
from ._compression import Compressor
from ._handles import PENDING, Handle, Rows, internal
from ._objects import sparse_allreduce_async
from ._ops import WIRE, Average, ReduceOp, raw_allreduce
from ._request import GRADIENTS, Request, digest

__all__ = ["Reducer"]


class Reducer:
    """Owns the hooks and buckets of one DistributedOptimizer (on a rank of its process set)."""

    def __init__(self, layout: list[list[torch.Tensor]], compression: type[Compressor], op: ReduceOp,
                 predivide: float, sparse_as_dense: bool, passes: int, channel: Channel) -> None:
        self.buckets = [Bucket(b) for b in layout]
        self._where = {id(p): i for i, b in enumerate(layout) for p in b}
        self.compression, self.op, self.sparse_as_dense, self.predivide = compression, op, sparse_as_dense, predivide
        self.scale = (1.0 / predivide, predivide) if op == Average else (1.0, 1.0)
        self.passes, self.channel = passes, channel
        self._left = {key: passes for key in self._where}
        self._prepared = 0  # buckets copied into their buffers this step (in order)
        self._launched = 0  # buckets on the wire this step (in order, only once the round is agreed)
        self._lock = threading.RLock()
        self._hooks = [p.register_post_accumulate_grad_hook(self._ready)  # type: ignore[no-untyped-call]
                       for b in layout for p in b]
        shapes = tuple((tuple(tuple(p.shape) for p in b), str(b[0].dtype), b[0].device.type) for b in layout)
        signature = (shapes, compression.__name__, int(op), predivide)
        self._name = f"layout-{digest(signature)}"
        total = sum(sum(b.sizes) for b in self.buckets)
        self._request = Request(GRADIENTS, self._name, signature, f"{len(layout)} gradient buckets, {total} elements")
        self._key = self._request.key
        self._round: Handle | None = None  # this step's gradient round, once begun
        self._agreed = False  # this step may send its buckets: its round was agreed, or the layout has a group
        self._sparse: list[torch.Tensor] = []
        wire_op = WIRE[op]
        channel.layouts.register(self._key, [(b.buffer.numel(), compression.compress(b.buffer)[0].dtype, wire_op,
                                              b.buffer.is_cuda) for b in self.buckets])

    def rebuilt(self, layout: list[list[torch.Tensor]]) -> Reducer:
        """A reducer with the same options over a new layout; this one's hooks are removed."""
        self.remove_hooks()
        return Reducer(layout, self.compression, self.op, self.predivide, self.sparse_as_dense, self.passes,
                       self.channel)

    def set_passes(self, passes: int) -> None:
        self.passes = passes
        self.reset()

    def in_progress(self) -> bool:
        """True between the first counted backward pass and the end of ``synchronize``."""
        return self._prepared > 0 or any(left != self.passes for left in self._left.values())

    def reset(self) -> None:
        self._prepared, self._launched, self._sparse, self._agreed = 0, 0, [], False
        if self._round is not None and self._round.state != PENDING:
            self._round = None  # a round begun and not agreed yet is kept for the next step
        self._left = {key: self.passes for key in self._where}
        for bucket in self.buckets:
            bucket.reset()

    def remove_hooks(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def _ready(self, param: torch.Tensor) -> None:
        """The post-accumulate-grad hook: count this pass; prepare every complete bucket in order."""
        with self._lock:
            left = self._left[id(param)] - 1
            if left < 0:
                raise AssertionError("Gradients were computed more than backward_passes_per_step times before call "
                                     "to step(). Increase backward_passes_per_step to accumulate gradients locally.")
            self._left[id(param)] = left
            if left:
                return
            self._begin()
            self.buckets[self._where[id(param)]].pending -= 1
            while self._prepared < len(self.buckets) and self.buckets[self._prepared].pending <= 0:
                self._prepare(self.buckets[self._prepared])
            if not self._agreed:
                self.channel.poll()  # a round that is over by now sends the prepared buckets
            self._launch_prepared()

    def _begin(self) -> None:
        """The step's first final gradient is there: a layout with a group of its own may send at once; any other
        step starts its control round, which nothing waits for here."""
        if self._agreed:
            return
        if self.channel.layouts.group(self._key) is not None:
            self._agreed = True
        elif self._round is None:
            self._round = Handle(self._request, self._on_agreed, self.channel)
            self.channel.begin(self._round)

    def _on_agreed(self, rows: Rows | None) -> tuple[list[dist.Work], Any]:
        """Every rank agreed to this step's round: the prepared buckets go out now, in order, before anything
        else on the set (the channel calls this when it takes the decision)."""
        self._agreed = True
        self._launch_prepared()
        return [], lambda: None

    def _grad(self, p: torch.Tensor) -> torch.Tensor:
        if p.grad is None:  # this rank computed none, others may have: take part with zeros (Horovod does)
            p.grad = torch.zeros_like(p)
        if p.grad.is_sparse:
            if not self.sparse_as_dense:
                self._sparse.append(p)  # allgathered after the buckets; zeros in the bucket
                return torch.zeros(p.numel(), dtype=p.dtype, device=p.device)
            return p.grad.to_dense().reshape(-1)
        return p.grad.reshape(-1)

    def _prepare(self, bucket: Bucket) -> None:
        torch.cat([self._grad(p) for p in bucket.params], out=bucket.buffer)
        bucket.wire, bucket.ctx = self.compression.compress(bucket.buffer)
        self._prepared += 1

    def _launch_prepared(self) -> None:
        with self._lock:
            group = self.channel.layouts.group(self._key)
            while self._agreed and self._launched < self._prepared:
                bucket = self.buckets[self._launched]
                assert bucket.wire is not None
                if self._launched == 0 and group is not None:
                    self.channel.layouts.stepped(self._key)
                bucket.work, bucket.finish = raw_allreduce(bucket.wire, self.op, *self.scale, self.channel, group)
                self._launched += 1

    def synchronize(self) -> None:
        """Start the buckets not started yet, wait for the allreduces, and write the results into ``.grad``."""
        with self._lock:
            self._begin()
            while self._prepared < len(self.buckets):
                self._prepare(self.buckets[self._prepared])
        try:
            if not self._agreed:
                assert self._round is not None
                self._round.wait()  # raises if the ranks do not agree (another collective, another model)
            self._launch_prepared()
            with torch.no_grad():
                for bucket in self.buckets:
                    try:
                        bucket.work.wait()
                    except RuntimeError as exc:
                        raise internal(exc) from exc
                    reduced = self.compression.decompress(bucket.finish(), bucket.ctx)
                    for p, part in zip(bucket.params, reduced.split_with_sizes(bucket.sizes)):
                        self._write(p, part.view_as(p))
            self._reduce_sparse()
        finally:
            self.reset()

    def _reduce_sparse(self) -> None:
        """Sparse gradients, in parameter order on every rank: every rank's entries (Horovod's sparse allreduce)."""
        order = {id(p): i for i, p in enumerate(p for b in self.buckets for p in b.params)}
        for p in sorted(self._sparse, key=lambda p: order[id(p)]):
            assert p.grad is not None
            p.grad = sparse_allreduce_async(p.grad, f"{self._name}.{order[id(p)]}", self.op,
                                            self.channel.process_set)()

    def _write(self, p: torch.Tensor, value: torch.Tensor) -> None:
        assert p.grad is not None
        if p.grad.is_sparse:
            if self.sparse_as_dense:
                p.grad = value.to_sparse()
        else:
            p.grad.copy_(value)
