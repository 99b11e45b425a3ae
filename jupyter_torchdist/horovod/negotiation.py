"""The negotiation: every collective is agreed by all the ranks of its process set before any data is sent (Horovod's
coordinator, without one).

A request and its control row (``Request``), the wire's dtypes and ops, the decision every rank
takes from a round of control messages, the errors of a round that cannot launch, the handles of async
calls, the DistributedOptimizer's layouts, and the channel that runs the rounds.
"""
from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, NoReturn, Protocol

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import PrefixStore, _get_default_store

from .errors import HorovodInternalError, JoinedRankError, MismatchError, StalledError

__all__ = ["ALLREDUCE", "ALLGATHER", "BROADCAST", "ALLTOALL", "REDUCESCATTER", "BARRIER", "GRADIENTS", "KIND_NAMES",
           "SERVED", "ROW", "Request", "digest", "dtype_code", "dtype_of", "describe", "WIRE_OPS",
           "all_gather_single", "reduce_scatter_single", "reduce_dtype", "for_reduction", "movable", "JOINED",
           "WAITING", "ASYNC", "HEADER", "LAUNCH", "MISMATCH", "REFUSED", "NONE", "STALLED", "ALL_JOINED",
           "Proposal", "Decision", "encode", "decode", "decide", "mismatch_error", "stalled_error", "Handle",
           "Launcher", "Rows", "PENDING", "LAUNCHED", "DONE", "FAILED", "synchronize", "poll", "internal",
           "Layouts", "BucketWire", "Channel"]


# -- request ----------------------------------------------------------------------------------------------------------
# What one collective is, in a form every rank can compare: the request a rank proposes to the others.
#
# Horovod matches collectives by name through a coordinator; here each rank proposes its requests in a small control
# message (see the channel below). A request is reduced to integers: a ``key`` saying which collective it is (the kind
# and the user's ``name=``; unnamed requests of a kind match the other ranks' unnamed requests of that kind in order,
# as Horovod's generated names do), a ``sig`` digest of everything that must agree across ranks (shapes, dtype, op,
# scale factors, root rank, device), what a rank inside ``join()`` needs to take part (the buffer's dtype, element
# count, reduction and device) and one per-rank value the others need (an allgather's first dimension).

ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER, BARRIER, GRADIENTS = 1, 2, 3, 4, 5, 6, 7
KIND_NAMES = {ALLREDUCE: "allreduce", ALLGATHER: "allgather", BROADCAST: "broadcast", ALLTOALL: "alltoall",
              REDUCESCATTER: "reducescatter", BARRIER: "barrier", GRADIENTS: "DistributedOptimizer gradient round"}
SERVED = frozenset({ALLREDUCE, BARRIER, GRADIENTS})  # what a rank inside join() takes part in (Horovod's rule)
ROW = 8  # integers per request in a control message: key, sig, kind, dtype, numel, wire op, flags, aux

_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8, torch.int8, torch.int16,
           torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128)
_CODES = {dtype: i + 1 for i, dtype in enumerate(_DTYPES)}
CUDA_FLAG = 1


def digest(value: Any) -> int:
    """A stable 56-bit digest (Python's hash() differs between processes), positive and within int64."""
    return int.from_bytes(hashlib.blake2b(repr(value).encode(), digest_size=7).digest(), "little")


def dtype_code(dtype: torch.dtype) -> int:
    return _CODES.get(dtype, 0)


def dtype_of(code: int) -> torch.dtype:
    return _DTYPES[code - 1]


def describe(tensor: torch.Tensor) -> str:
    """``float32 [17, 17]`` (``on cuda`` added for CUDA tensors): how an error names one rank's tensor."""
    where = " on cuda" if tensor.is_cuda else ""
    return f"{str(tensor.dtype).replace('torch.', '')} {list(tensor.shape)}{where}"


@dataclass(eq=False)
class Request:
    """One collective as this rank proposes it.

    ``signature``: what must be equal on every rank; ``description``: this rank's side in words, for errors.
    ``wire``: (dtype, element count, index into the wire ops, flags) of the buffer a joined rank contributes zeros
    to (allreduce); ``aux``: a per-rank value the launch needs from every rank (allgather: the first dimension).
    """

    kind: int
    name: str | None
    signature: tuple[Any, ...]
    description: str
    wire: tuple[int, int, int, int] = (0, 0, 0, 0)
    aux: int = 0
    key: int = field(init=False)
    sig: int = field(init=False)

    def __post_init__(self) -> None:
        label = f"{KIND_NAMES[self.kind]}.{'noname' if self.name is None else 'name.' + self.name}"
        self.key = digest(label)
        self.sig = digest((self.kind, self.signature))

    def row(self) -> list[int]:
        return [self.key, self.sig, self.kind, *self.wire, self.aux]

    @property
    def label(self) -> str:
        """``allreduce 'grad.w'`` or ``allreduce`` (unnamed): how errors name the collective."""
        return KIND_NAMES[self.kind] + ("" if self.name is None else f" {self.name!r}")


def wire_fields(tensor: torch.Tensor, wire_op: int = 0) -> tuple[int, int, int, int]:
    """What a rank inside join() needs to contribute zeros to an all_reduce of ``tensor``."""
    return dtype_code(tensor.dtype), tensor.numel(), wire_op, CUDA_FLAG if tensor.is_cuda else 0


def shapes_of(tensors: Sequence[torch.Tensor]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(t.shape) for t in tensors)


# -- wire -------------------------------------------------------------------------------------------------------------
# What travels: every dtype Horovod supports on CPU through gloo, exactly, and the reductions on the wire.
#
# gloo (and NCCL) have every dtype Horovod supports but int16 (uint8, int8, int16, int32, int64, float16, bfloat16,
# float32, float64, bool). An int16 tensor is reduced as int32 and cast back: the low 16 bits of an int32 sum or
# product are the int16 result with int16's wrap-around, and min/max are exact. Collectives that only move data
# (broadcast, allgather, alltoall) carry it as a float16 view of the same bytes: gloo copies them, never computes.

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


# -- decide -----------------------------------------------------------------------------------------------------------
# The decision every rank takes from one round of control messages: the same on every rank, from the same data.
#
# A round is an all_gather of one fixed-size message per rank: its status (inside ``join()``, waiting for a
# collective, or issuing an async one that may wait for later), whether it joined in this very round, and its
# candidate requests (the requests it has not launched yet, oldest first; see ``ROW``). The first candidate
# of the lowest active rank that every active rank also proposes is the collective of this round (unnamed requests of
# a kind match in order: the first one on each rank):
#
# - its signature differs between ranks: ``MISMATCH`` (every rank raises, naming each rank's side);
# - a rank is inside ``join()`` and the kind is not one a joined rank takes part in (an allreduce of several dtypes
#   at once included): ``REFUSED``;
# - otherwise ``LAUNCH``: the active ranks issue it, a joined rank contributes zeros (allreduce, gradients).
#
# No common candidate: ``NONE`` (an async request waits for a later round), or ``STALLED`` when every active rank is
# waiting, since no later round can match them (Horovod would hang there). Every rank inside ``join()``:
# ``ALL_JOINED``, with the last rank to join.

JOINED, WAITING, ASYNC = 0, 1, 2
HEADER = 3  # status, fresh (joined in this round), number of candidates
LAUNCH, MISMATCH, REFUSED, NONE, STALLED, ALL_JOINED = "launch", "mismatch", "refused", "none", "stalled", "joined"


@dataclass
class Proposal:
    status: int
    fresh: bool
    rows: list[list[int]]

    def find(self, key: int) -> int | None:
        """Index of the first candidate with ``key``."""
        return next((i for i, row in enumerate(self.rows) if row[0] == key), None)


@dataclass
class Decision:
    kind: str
    key: int = 0
    picks: list[int | None] = field(default_factory=list)  # per rank: index of its candidate for ``key``
    joined: list[int] = field(default_factory=list)  # ranks inside join()
    last_joined: int = -1

    def rows(self, proposals: list[Proposal]) -> list[list[int] | None]:
        """Every rank's row for the chosen request (None for a rank inside join())."""
        return [None if pick is None else p.rows[pick] for p, pick in zip(proposals, self.picks)]


def encode(status: int, fresh: bool, rows: list[list[int]], capacity: int) -> list[int]:
    """One rank's message: header then ``capacity`` candidate rows (unused ones zero)."""
    flat = [status, int(fresh), len(rows)]
    for row in rows:
        flat.extend(row)
    return flat + [0] * (HEADER + capacity * ROW - len(flat))


def decode(flat: list[int], ranks: int) -> list[Proposal]:
    length = len(flat) // ranks
    out = []
    for r in range(ranks):
        msg = flat[r * length:(r + 1) * length]
        rows = [msg[HEADER + i * ROW:HEADER + (i + 1) * ROW] for i in range(msg[2])]
        out.append(Proposal(msg[0], bool(msg[1]), rows))
    return out


def _common(active: list[Proposal]) -> tuple[int, list[int]] | None:
    """The first candidate of the first active rank that every active rank proposes: (key, index per rank)."""
    for row in active[0].rows:
        picks = [p.find(row[0]) for p in active]
        if all(pick is not None for pick in picks):
            return row[0], picks  # type: ignore[return-value]
    return None


def decide(proposals: list[Proposal]) -> Decision:
    """The round's decision (see the module docstring)."""
    joined = [r for r, p in enumerate(proposals) if p.status == JOINED]
    if len(joined) == len(proposals):
        return Decision(ALL_JOINED, joined=joined, last_joined=max(r for r in joined if proposals[r].fresh))
    active = [p for p in proposals if p.status != JOINED]
    common = _common(active)
    if common is None:
        stalled = all(p.status == WAITING for p in active)
        return Decision(STALLED if stalled else NONE, joined=joined)
    key, active_picks = common
    picks: list[int | None] = []
    found = iter(active_picks)
    for p in proposals:
        picks.append(None if p.status == JOINED else next(found))
    rows = [row for row in Decision(LAUNCH, key, picks).rows(proposals) if row is not None]
    if any(row[1] != rows[0][1] for row in rows):
        return Decision(MISMATCH, key, picks, joined)
    if joined and (rows[0][2] not in SERVED or rows[0][2] == ALLREDUCE and rows[0][3] == 0):
        return Decision(REFUSED, key, picks, joined)
    return Decision(LAUNCH, key, picks, joined)


# -- mismatch ---------------------------------------------------------------------------------------------------------
# The errors of a round that cannot launch anything, naming what each rank asked for.
#
# Every rank takes the same decision from the same round, so every rank reaches these functions together and
# exchanges its side in words (an all_gather of small objects, only on this error path): each rank's error names
# every rank's shape, dtype, op, scale factors or root, so the cause shows on whichever rank the user looks at.

_RULE = ("Every rank must pass the same shape (allgather and alltoall: all but the first dimension), dtype, op, "
         "scale factors, root rank and device to the same collective.")


def _sides(group: Any, request: Request | None) -> list[tuple[str, str] | None]:
    mine = None if request is None else (request.label, request.description)
    sides: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(sides, mine, group=group)
    return sides


def _listing(sides: list[tuple[str, str] | None], ranks: list[int], with_label: bool) -> str:
    parts = []
    for rank, side in zip(ranks, sides):
        if side is None:
            parts.append(f"rank {rank}: (inside hvd.join() or not waiting)")
        else:
            label, description = side
            text = f"{label} of {description}" if with_label and description else label if with_label else description
            parts.append(f"rank {rank}: {text}")
    return "; ".join(parts)


def mismatch_error(group: Any, request: Request | None, ranks: list[int]) -> MismatchError:
    """The ranks called the same collective differently: the error every rank raises."""
    sides = _sides(group, request)
    label = next(side[0] for side in sides if side is not None)
    return MismatchError(f"Mismatched {label}: the ranks called it with different arguments "
                         f"({_listing(sides, ranks, with_label=False)}). {_RULE} Nothing was sent; the process group "
                         "is still usable.")


def stalled_error(group: Any, request: Request | None, ranks: list[int]) -> StalledError:
    """Every rank waits on a collective no other rank waits on: the error the waiting ranks raise."""
    sides = _sides(group, request)
    return StalledError("The ranks wait on different collectives, so none of them can run (Horovod would hang "
                        f"here): {_listing(sides, ranks, with_label=True)}. Issue the same collectives on every "
                        "rank; where the order differs between ranks, give them matching name= arguments.")


# -- handles ----------------------------------------------------------------------------------------------------------
# Handles: what the ``*_async`` calls return, and ``synchronize``/``poll`` on them.
#
# A handle's collective is negotiated first (the channel, below): when the other ranks are not at the same collective
# yet (Horovod matches collectives by name, so ranks may issue them in different orders), it waits, not yet on the
# wire, and is launched by a later round: at the latest when ``synchronize`` needs it.

class Resolver(Protocol):
    """What a handle needs of its channel (``Channel``): a round that launches or fails it."""

    def resolve(self, handle: Handle) -> None: ...


Rows = list[list[int] | None]  # every rank's request as the round saw it (None: a rank inside join())
Launcher = Callable[[Rows | None], tuple[list[dist.Work], Callable[[], Any]]]

PENDING, LAUNCHED, DONE, FAILED = "pending", "launched", "done", "failed"


class Handle:
    """One collective: pending (negotiated, not on the wire yet), launched, done or failed."""

    __slots__ = ("request", "channel", "state", "_launcher", "_works", "_finish", "_result", "_error", "_seen_done")

    def __init__(self, request: Request, launcher: Launcher, channel: Resolver | None = None) -> None:
        self.request, self.channel, self.state = request, channel, PENDING
        self._launcher: Launcher | None = launcher
        self._works: list[dist.Work] = []
        self._finish: Callable[[], Any] | None = None
        self._result: Any = None
        self._error: BaseException | None = None
        self._seen_done = False  # complete, as seen by poll() or by a later round (see finished())

    def launch(self, rows: Rows | None) -> None:
        """Issue the data collective(s): every rank decided to, in the same round."""
        assert self._launcher is not None
        try:
            self._works, self._finish = self._launcher(rows)
        except BaseException as exc:
            self._fail_with(exc)
        self._launcher, self.state = None, LAUNCHED

    def fail(self, error: BaseException) -> None:
        self._error, self._launcher, self.state = error, None, FAILED

    def _fail_with(self, exc: BaseException) -> NoReturn:
        """Fail with ``exc`` as Horovod would see it (``internal``) and raise that."""
        error = internal(exc)
        self.fail(error)
        if error is exc:
            raise exc
        raise error from exc

    def finished(self) -> bool:
        """Over: its name may be used again (Horovod's rule). A launched collective counts once its completion was
        seen, by ``poll``/``synchronize`` or by a later round on its process set, never merely by timing: a name
        reused at once is refused whatever the speed of the wire."""
        return self.state in (DONE, FAILED) or self._seen_done

    def check_done(self) -> bool:
        """For the channel's rounds: record whether a launched collective has completed."""
        if self.state == LAUNCHED and all(work.is_completed() for work in self._works):
            self._seen_done = True
        return self.finished()

    def poll(self) -> bool:
        """True once ``wait()`` will not block: done, failed, or launched and complete. A pending collective
        (the other ranks have not reached it yet) polls False until a later collective or ``synchronize``."""
        if self.state == PENDING:
            return False
        return self.state != LAUNCHED or self.check_done()

    def wait(self) -> Any:
        """Negotiate if still pending, wait, and return the result (the same one on later calls)."""
        if self.state == PENDING:
            assert self.channel is not None
            self.channel.resolve(self)
        if self.state == FAILED:
            assert self._error is not None
            raise self._error
        if self.state == LAUNCHED:
            try:
                for work in self._works:
                    work.wait()
                assert self._finish is not None
                result = self._finish()
            except BaseException as exc:
                self._fail_with(exc)
            self._result, self._finish, self._works, self.state = result, None, [], DONE
        return self._result


def internal(exc: BaseException) -> BaseException:
    """A collective that failed on the wire (a rank died, a timeout) is Horovod's ``HorovodInternalError``, which
    code written for Horovod catches; our own errors and argument errors stay what they are."""
    if isinstance(exc, RuntimeError) and not isinstance(exc, (HorovodInternalError, NotImplementedError)):
        return HorovodInternalError(f"{type(exc).__name__}: {exc}")
    return exc


def synchronize(handle: Any) -> Any:
    """Wait for an async operation and return its result (a tensor; (tensor, splits) for alltoall with splits)."""
    if not isinstance(handle, Handle):
        raise TypeError(f"synchronize() takes a handle from an *_async call, got {type(handle).__name__}")
    return handle.wait()


def poll(handle: Any) -> bool:
    """True when the async operation is done (``synchronize`` will not block)."""
    if not isinstance(handle, Handle):
        raise TypeError(f"poll() takes a handle from an *_async call, got {type(handle).__name__}")
    return handle.poll()


# -- layouts ----------------------------------------------------------------------------------------------------------
# The DistributedOptimizer layouts of a process set, and the gloo group each CPU layout's buckets travel on.
#
# Every step of a DistributedOptimizer is a collective of the whole set: its buckets, of the layout's sizes. The
# first step of a layout is negotiated like any collective (every rank checks that the others have the same layout
# before a bucket goes out), and that agreement gives the layout a gloo group of its own, created by every rank of
# the set in that same round. From then on the layout's buckets go out on its group as soon as backward produces
# them, with no control message at all (DDP's traffic), and nothing else ever travels on that group, so its
# collectives can only meet each other: the same bucket sizes, in the same order, on every rank.
#
# A rank inside ``join()`` keeps one step's buckets of zeros posted on each layout group: when the others' step
# completes them it posts the next step's. When every rank has joined, the ranks compare how many steps each put on
# each layout group and post zeros up to the most, so every group ends with the same sequence on every rank.
# Layouts of CUDA tensors (or with the negotiation off) have no group of their own: each of their steps is
# negotiated, the buckets go out on the set's group once every rank agreed, and a joined rank replays them when it
# sees the round.

class ChannelInfo(Protocol):
    """What the layouts need of their channel (``Channel``)."""

    negotiate: bool
    prefix: str
    rank: int
    size: int
    group: Any


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


# -- channel ----------------------------------------------------------------------------------------------------------
# One process set's negotiation: every collective is agreed by all its ranks before any data is sent.
#
# torch.distributed matches collectives by their order on each rank and trusts the shapes; a rank that sends something
# else hangs or aborts the process (gloo's abort on a size mismatch). Horovod instead negotiates every collective by
# name through a coordinator. Here each rank takes part in rounds of a small fixed-size all_gather on the process
# set's group (the same size whatever the collective, so rounds always match each other): it proposes its requests not
# launched yet, every rank takes the same decision from the same data (``decide``, above), and only then is the data
# collective issued, by every rank at the same point of its sequence of collectives. So ranks that disagree raise
# ``MismatchError`` together and the group stays usable; collectives issued in different orders on different ranks
# (Horovod's names) are matched; a rank inside ``join()`` keeps taking part in rounds and contributes zeros.
#
# An async call takes part in one round; if the others are not at the same collective yet, its request stays pending
# (in every later round's proposal) and ``synchronize`` waits for it. A DistributedOptimizer starts its round when
# backward produces the first gradient and waits for it only when the first bucket is ready (``begin``), so the
# round costs no time in a step. ``JUPYTER_TORCHDIST_HOROVOD_JOIN=0`` skips the rounds: data goes out at once, as
# DDP's does, with no join(), no name matching and no mismatch checks.

CAPACITY = 8  # candidates per message: the oldest pending requests and the one the round is for


class Channel:
    """The negotiation state of one process set on this rank (its torch group, its pending requests)."""

    def __init__(self, group: Any, ranks: list[int], rank: int, device: torch.device, negotiate: bool) -> None:
        self.group, self.ranks, self.rank, self.size = group, ranks, rank, len(ranks)
        self.device, self.negotiate = device, negotiate
        self.process_set: Any = None  # the hvd.ProcessSet this channel belongs to
        self.prefix = ""  # store prefix of this channel's gradient groups (set by _process_sets)
        self.layouts = Layouts(self)  # DistributedOptimizer layouts agreed by every rank, and their groups
        self.pending: list[Handle] = []
        self._names: dict[int, Handle] = {}
        self._inflight: tuple[Any, torch.Tensor, list[Handle], Handle | None] | None = None
        self._lock = threading.RLock()

    # -- what the collectives call ------------------------------------------------------------------------------
    def submit(self, handle: Handle, wait: bool) -> Handle:
        """Negotiate ``handle``'s collective: launched when every rank agrees; ``wait``: until it is."""
        with self._lock:
            self._claim_name(handle)
            if not self.negotiate:
                handle.launch(None)
                return handle
            self.pending.append(handle)
            self._round(handle, WAITING if wait else ASYNC)
            if wait:
                self.resolve(handle)
        return handle

    def begin(self, handle: Handle) -> None:
        """Start the round for ``handle`` without waiting for it (``resolve`` finishes it)."""
        with self._lock:
            if not self.negotiate:
                handle.launch(None)
                return
            self._finish_inflight()
            self.pending.append(handle)
            candidates = self._candidates(handle)
            out, work = self._gather(WAITING, False, candidates, async_op=True)
            self._inflight = (work, out, candidates, handle)

    def poll(self) -> None:
        """Act on the round started by ``begin`` if it is over, without waiting for it."""
        with self._lock:
            if self._inflight is not None and self._inflight[0].is_completed():
                self._finish_inflight()

    def resolve(self, handle: Handle) -> None:
        """Rounds until ``handle`` is launched or failed (the others reach it, or raise with it)."""
        with self._lock:
            self._finish_inflight()
            while handle.state == PENDING:
                self._round(handle, WAITING)

    def join(self, device: int) -> int:
        """Take part in the others' rounds, contributing zeros, until every rank has joined; the last to join.

        Meanwhile one step of zeros stays posted on every DistributedOptimizer layout group (see ``Layouts``, above),
        whose steps need no round: the wait for each round polls them.
        """
        with self._lock:
            self._finish_inflight()
            while self.pending:
                self.resolve(self.pending[0])
            fresh = True
            while True:
                self.layouts.post()
                decision = self._round(None, JOINED, fresh, device, idle=self.layouts.post)
                fresh = False
                if decision.kind == ALL_JOINED:
                    self.layouts.flush()
                    return self.ranks[decision.last_joined]

    def close(self, reason: str) -> None:
        """Fail every pending request (``shutdown()``); their ``synchronize`` raises ``reason``."""
        for handle in self.pending:
            handle.fail(HorovodInternalError(reason))
        self.pending.clear()

    # -- rounds -------------------------------------------------------------------------------------------------
    def _claim_name(self, handle: Handle) -> None:
        request = handle.request
        if request.name is None:
            return
        other = self._names.get(request.key)
        if other is not None and not other.finished():
            raise ValueError(f"{request.label} is already in progress on this rank (rank {dist.get_rank()}): a "
                             "name may be used again once its collective is done. Use a different name= or "
                             "synchronize the first one.")
        self._names[request.key] = handle

    def _candidates(self, target: Handle | None) -> list[Handle]:
        candidates = self.pending[:CAPACITY - 1]
        if target is not None and target not in candidates:
            candidates.append(target)
        return candidates

    def _gather(self, status: int, fresh: bool, candidates: list[Handle],
                async_op: bool = False) -> tuple[torch.Tensor, Any]:
        flat = encode(status, fresh, [h.request.row() for h in candidates], CAPACITY)
        mine = torch.tensor(flat, dtype=torch.int64, device=self.device)
        out = mine.new_empty(self.size * len(flat))
        work = all_gather_single(out, mine, group=self.group, async_op=async_op)
        return out, work

    def _finish_inflight(self) -> None:
        if self._inflight is None:
            return
        work, out, candidates, target = self._inflight
        self._inflight = None
        work.wait()
        self._apply(decode(out.tolist(), self.size), WAITING, candidates, target, -1)

    def _round(self, target: Handle | None, status: int, fresh: bool = False, device: int = -1,
               idle: Callable[[], None] | None = None) -> Decision:
        """One round; ``idle`` is called while waiting for the other ranks (inside join())."""
        self._finish_inflight()
        if self._names:  # named collectives completed by now free their names (see Handle.finished)
            self._names = {key: h for key, h in self._names.items() if not h.check_done()}
        candidates = self._candidates(target)
        out, work = self._gather(status, fresh, candidates, async_op=idle is not None)
        if idle is not None:
            while not work.is_completed():
                idle()
                time.sleep(0.0005)
            work.wait()
        return self._apply(decode(out.tolist(), self.size), status, candidates, target, device)

    def _apply(self, proposals: list[Proposal], status: int, candidates: list[Handle], target: Handle | None,
               device: int) -> Decision:
        """Act on the round's decision, the same on every rank."""
        decision = decide(proposals)
        pick = decision.picks[self.rank] if decision.picks else None
        mine = candidates[pick] if pick is not None else None
        if decision.kind == LAUNCH:
            row = next(row for row in decision.rows(proposals) if row is not None)
            if row[2] == GRADIENTS:
                self.layouts.agreed(row[0])
            if mine is None:
                self._serve(row, device)
            else:
                self.pending.remove(mine)
                mine.launch(decision.rows(proposals))
        elif decision.kind == MISMATCH:
            error: BaseException = mismatch_error(self.group, mine.request if mine else None, self.ranks)
            self._fail(mine, error)
        elif decision.kind == REFUSED and mine is not None:
            self._fail(mine, JoinedRankError(_refusal(mine.request, len(decision.joined))))
        elif decision.kind == STALLED:
            waiting = target if status == WAITING else None
            error = stalled_error(self.group, waiting.request if waiting else None, self.ranks)
            self._fail(waiting, error)
        return decision

    def _fail(self, handle: Handle | None, error: BaseException) -> None:
        if handle is None:
            return
        if handle in self.pending:
            self.pending.remove(handle)
        handle.fail(error)

    def _serve(self, row: list[int], device: int) -> None:
        """Inside join(): take part in the collective the active ranks launch (zeros), or in nothing."""
        kind, dtype, numel, wire_op, flags = row[2:7]
        if kind == ALLREDUCE:
            where = torch.device("cpu")
            if flags & CUDA_FLAG:
                where = torch.device("cuda", device if device >= 0 else torch.cuda.current_device())
            zeros = torch.zeros(numel, dtype=dtype_of(dtype), device=where)
            dist.all_reduce(zeros, op=WIRE_OPS[wire_op], group=self.group)
        elif kind == GRADIENTS:
            self.layouts.replay(row[0], device)
            self.layouts.post()


def _refusal(request: Request, joined: int) -> str:
    hint = " Specify sparse_as_dense=True if using DistributedOptimizer." if request.label.startswith("allgather") \
        else ""
    return (f"{request.label} is not supported while a rank has called hvd.join() ({joined} joined), as in "
            f"Horovod: only allreduce and barrier are.{hint}")
