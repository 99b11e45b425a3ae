"""The DistributedOptimizer layouts of a process set, and the gloo group each CPU layout's buckets travel on.

Every step of a DistributedOptimizer is a collective of the whole set: its buckets, of the layout's sizes. The
first step of a layout is negotiated like any collective (every rank checks that the others have the same layout
before a bucket goes out), and that agreement gives the layout a gloo group of its own, created by every rank of
the set in that same round. From then on the layout's buckets go out on its group as soon as backward produces
them, with no control message at all (DDP's traffic), and nothing else ever travels on that group, so its
collectives can only meet each other: the same bucket sizes, in the same order, on every rank.

A rank inside ``join()`` keeps one step's buckets of zeros posted on each layout group: when the others' step
completes them it posts the next step's. When every rank has joined, the ranks compare how many steps each put on
each layout group and post zeros up to the most, so every group ends with the same sequence on every rank.
Layouts of CUDA tensors (or with the negotiation off) have no group of their own: each of their steps is
negotiated, the buckets go out on the set's group once every rank agreed, and a joined rank replays them when it
sees the round.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import PrefixStore, _get_default_store

from ._wire import WIRE_OPS


class ChannelInfo(Protocol):
    """What the layouts need of their channel (``_channel.Channel``)."""

    negotiate: bool
    prefix: str
    rank: int
    size: int
    group: Any

__all__ = ["Layouts", "BucketWire"]

BucketWire = tuple[int, torch.dtype, int, bool]  # elements, dtype on the wire, index into WIRE_OPS, on CUDA


@dataclass
class _Layout:
    buckets: list[BucketWire]
    group: Any = None  # the layout's own gloo group, once every rank agreed to it (CPU layouts only)
    steps: int = 0  # steps this rank put on the group (its own, or zeros inside join())
    posted: list[dist.Work] = field(default_factory=list)  # inside join(): the last step of zeros posted


class Layouts:
    """One channel's layouts: registered by its reducers, given a group when first agreed."""

    def __init__(self, channel: ChannelInfo) -> None:
        self.channel = channel
        self._layouts: dict[int, _Layout] = {}
        self._agreed: set[int] = set()

    def register(self, key: int, buckets: list[BucketWire]) -> None:
        """A reducer's layout (every rank registers the same, since every rank builds the same optimizers)."""
        self._layouts.setdefault(key, _Layout(buckets))

    def group(self, key: int) -> Any:
        """The layout's own group once agreed (None: CUDA, negotiation off, or not agreed yet)."""
        layout = self._layouts.get(key)
        return None if layout is None else layout.group

    def stepped(self, key: int) -> None:
        """This rank put one step of the layout's buckets on its group."""
        self._layouts[key].steps += 1

    def agreed(self, key: int) -> None:
        """Every rank of the set just agreed to a round of this layout (in the same round): the first time, a CPU
        layout gets its group, and a rank inside join() posts its zeros there."""
        layout = self._layouts.get(key)
        if layout is None:
            raise RuntimeError("hvd.join(): the other ranks reduce the gradients of a DistributedOptimizer this rank "
                               "does not have; create the same optimizers on every rank")
        if key in self._agreed:
            return
        self._agreed.add(key)
        if self.channel.negotiate and not any(cuda for *_, cuda in layout.buckets):
            store = PrefixStore(f"{self.channel.prefix}/layout-{key}", _get_default_store())
            layout.group = dist.ProcessGroupGloo(store, self.channel.rank, self.channel.size, timedelta(minutes=30))

    def replay(self, key: int, device: int) -> None:
        """Inside join(), a round of a layout without a group of its own: its buckets with zeros, now."""
        layout = self._layouts[key]
        if layout.group is not None:
            return  # posted already (see post)
        for numel, dtype, wire_op, cuda in layout.buckets:
            where = torch.device("cuda", device if device >= 0 else torch.cuda.current_device()) if cuda else "cpu"
            dist.all_reduce(torch.zeros(numel, dtype=dtype, device=where), op=WIRE_OPS[wire_op],
                            group=self.channel.group)

    def post(self) -> None:
        """Inside join(): one step of zeros posted on every layout group that has none pending."""
        for layout in self._layouts.values():
            if layout.group is None or not all(work.is_completed() for work in layout.posted):
                continue
            for work in layout.posted:
                work.wait()  # raises if the others' step failed
            layout.posted = self._zeros(layout)

    def flush(self) -> None:
        """Every rank has joined: post zeros up to the most steps any rank put on each group, then wait for all."""
        keys = sorted(key for key, layout in self._layouts.items() if layout.group is not None)
        counts: list[Any] = [None] * self.channel.size
        dist.all_gather_object(counts, [self._layouts[key].steps for key in keys], group=self.channel.group)
        for i, key in enumerate(keys):
            layout = self._layouts[key]
            for _ in range(max(c[i] for c in counts) - layout.steps):
                layout.posted += self._zeros(layout)
            for work in layout.posted:
                work.wait()
            layout.posted = []

    @staticmethod
    def _zeros(layout: _Layout) -> list[dist.Work]:
        layout.steps += 1
        return [_allreduce(layout.group, torch.zeros(numel, dtype=dtype), wire_op)
                for numel, dtype, wire_op, _ in layout.buckets]


def _allreduce(group: Any, tensor: torch.Tensor, wire_op: int) -> dist.Work:
    work = dist.all_reduce(tensor, op=WIRE_OPS[wire_op], group=group, async_op=True)
    assert work is not None
    return work
