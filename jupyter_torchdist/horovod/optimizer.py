"""DistributedOptimizer: the wrapped optimizer's own class, with gradients averaged across ranks before step(); its
bucket layout and the reducer that sends the buckets as backward produces them.
"""
from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

from .basics import ProcessSet, check_initialized, global_process_set, resolve
from .compression import Compression, Compressor
from .mpi_ops import WIRE, Average, ReduceOp, raw_allreduce, resolve_op, sparse_allreduce_async
from .negotiation import GRADIENTS, PENDING, Channel, Handle, Request, Rows, digest, internal

__all__ = ["plan_buckets", "Bucket", "Reducer", "DistributedOptimizer"]


# -- buckets ----------------------------------------------------------------------------------------------------------
# The bucket layout of a DistributedOptimizer: which parameters' gradients travel together, in what order.
#
# Parameters are cut into buckets in reverse order (roughly the order backward produces their gradients): a first
# bucket of ~1 MB so communication starts early, then ~25 MB, as DDP does; or as Horovod's ``groups`` say. A bucket
# is one flat buffer, so it never mixes devices or dtypes.

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


# -- reducer ----------------------------------------------------------------------------------------------------------
# A DistributedOptimizer's gradient communication: DDP's overlap of the allreduces with the backward pass.
#
# A post-accumulate-grad hook per parameter counts the backward passes; when a parameter's last expected pass has
# accumulated, its bucket's count drops, and every bucket that is complete is copied into its flat buffer and started
# as an asynchronous allreduce, in bucket order. ``synchronize`` starts what is left (a parameter without a gradient
# contributes zeros, as in Horovod), waits, and writes the reduced values back into ``.grad``.
#
# The first step of a layout is negotiated (``negotiation``): its control round starts with the step's first final
# gradient, and its buckets go out once every rank agreed, which gives a CPU layout a gloo group of its own
# (``negotiation``); every later step's buckets go out on that group at once, with no control message (DDP's
# traffic), while a rank inside ``join()`` contributes zeros there. CUDA layouts negotiate every step, their
# buckets leaving on the set's group as soon as every rank agreed. Sparse gradients (``nn.Embedding(sparse=True)``)
# are allgathered after the buckets, as Horovod's sparse allreduce does, unless ``sparse_as_dense=True``; their slot
# in a bucket carries zeros.

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


# -- optimizer --------------------------------------------------------------------------------------------------------
# DistributedOptimizer: the wrapped optimizer's own class, with gradients averaged across ranks before step().
#
# As in Horovod, the result is an instance of a subclass of the optimizer's class (same name, ``isinstance``
# holds, LR schedulers accept it). Unlike Horovod it is not rebuilt from ``param_groups`` with the class defaults:
# it shares the wrapped optimizer's param_groups, state, defaults and hooks, so nothing the user configured is
# lost. The gradient communication lives in ``Reducer``. With ``process_set=``, gradients are averaged over
# that set's ranks; on a rank outside the set the optimizer steps on its own gradients, as in Horovod.

class _DistributedOptimizer(torch.optim.Optimizer):
    """Placed before the wrapped optimizer's class in the MRO; ``super()`` is the wrapped class."""

    _hvd_reducer: Reducer | None  # None on a rank outside the optimizer's process set
    _hvd_groups: Any
    _hvd_synchronized: bool
    _hvd_should_synchronize: bool

    def synchronize(self) -> None:
        """Finish every gradient allreduce now (e.g. before clipping); then step inside ``skip_synchronize()``."""
        if self._hvd_reducer is not None:
            self._hvd_reducer.synchronize()
        self._hvd_synchronized = True

    @contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        """``step()`` inside this block does not synchronize (it was done explicitly)."""
        self._hvd_should_synchronize = False
        try:
            yield
        finally:
            self._hvd_should_synchronize = True

    def step(self, closure: Any = None) -> Any:
        """Wait for the averaged gradients, then the wrapped optimizer's step."""
        if self._hvd_should_synchronize:
            if self._hvd_synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training slowdown. You may want to consider "
                              "using optimizer.skip_synchronize() context if you use optimizer.synchronize() in "
                              "your code.", stacklevel=2)
            self.synchronize()
        self._hvd_synchronized = False
        return super().step(closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Refused while gradients are being accumulated or communicated, as in Horovod."""
        if self._hvd_reducer is not None and self._hvd_reducer.in_progress():
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before optimizer.step() "
                                 "or optimizer.synchronize(). This is prohibited as it can cause a race condition.")
        super().zero_grad(set_to_none)

    def load_state_dict(self, state_dict: Any) -> None:
        """Load, and forget any half-done accumulation."""
        if self._hvd_reducer is not None:
            self._hvd_reducer.reset()
        self._hvd_synchronized, self._hvd_should_synchronize = False, True
        super().load_state_dict(state_dict)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add the group and rebuild the buckets, so that the new parameters' gradients are averaged too.

        (Horovod would silently leave them local.) Every rank must add the same groups in the same order.
        """
        super().add_param_group(param_group)
        reducer = getattr(self, "_hvd_reducer", None)
        if reducer is not None:
            if reducer.in_progress():
                raise AssertionError("add_param_group() was called between loss.backward() and optimizer.step().")
            self._hvd_reducer = reducer.rebuilt(plan_buckets(_trainable(self), self._hvd_groups))

    def set_backward_passes_per_step(self, passes: int) -> None:
        """Change how many backward passes are accumulated locally before communicating."""
        if passes <= 0:
            raise ValueError("backward_passes_per_step must be > 0")
        if self._hvd_reducer is not None:
            self._hvd_reducer.set_passes(passes)


def _trainable(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]


def _parameter_names(optimizer: torch.optim.Optimizer, named_parameters: Any) -> dict[torch.Tensor, str]:
    """Horovod's ``_parameter_names`` ({parameter: name}) and its checks on ``named_parameters``; without names,
    ``allreduce.noname.<group>.<index>`` as in Horovod (the same on every rank)."""
    if named_parameters is None:
        return {p: f"allreduce.noname.{i}.{j}" for i, group in enumerate(optimizer.param_groups)
                for j, p in enumerate(group["params"])}
    named = list(named_parameters)
    if any(not isinstance(item, tuple) for item in named):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), usually produced by "
                         "model.named_parameters().")
    names = [name for name, _ in named]
    dups = sorted({name for name in names if names.count(name) > 1})
    if dups:
        raise ValueError(f"Parameter names in named_parameters must be unique. Found duplicates: {', '.join(dups)}")
    all_ids = {id(p) for group in optimizer.param_groups for p in group["params"]}
    missing = all_ids - {id(p) for _, p in named}
    if missing:
        raise ValueError("named_parameters was specified, but one or more model parameters were not named. "
                         f"Python object ids: {', '.join(str(i) for i in sorted(missing))}")
    return {p: name for name, p in named}


def _check_groups(groups: Any) -> None:
    """Horovod's checks on ``groups``: a positive count, or lists of tensors with no tensor twice."""
    if groups is None or isinstance(groups, int) and not isinstance(groups, bool) and groups > 0:
        return
    if not isinstance(groups, list):
        raise ValueError("groups should be a non-negative integer or a list of list of torch.Tensor.")
    seen: set[int] = set()
    for group in groups:
        for p in group:
            if not isinstance(p, torch.Tensor):
                raise ValueError("groups must consist of torch.Tensor.")
            if id(p) in seen:
                raise ValueError("A parameter can only appear once in groups.")
            seen.add(id(p))


def _validate(op: ReduceOp, predivide: float, passes: int) -> None:
    if predivide != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if passes <= 0:
        raise ValueError("backward_passes_per_step must be > 0")


def DistributedOptimizer(optimizer: torch.optim.Optimizer, named_parameters: Any = None,
                         compression: type[Compressor] = Compression.none, backward_passes_per_step: int = 1,
                         op: Any = Average, gradient_predivide_factor: float = 1.0, num_groups: int = 0,
                         groups: Any = None, sparse_as_dense: bool = False,
                         process_set: ProcessSet = global_process_set) -> Any:
    """Wrap ``optimizer`` so that ``step()`` applies gradients averaged (``op``) over the ranks, like DDP.

    Gradients are allreduced in buckets while backward runs (see ``Reducer``, above). With
    ``backward_passes_per_step=k`` the gradients of k backward passes accumulate (sum) locally and are
    communicated once, on the k-th; the step then applies that local sum averaged over ranks, as Horovod and
    DDP's ``no_sync`` do. ``gradient_predivide_factor=f`` scales by 1/f before the sum and f/size after.
    ``compression=hvd.Compression.fp16`` sends float16. ``groups``/``num_groups`` set the buckets explicitly.
    Sparse gradients are allgathered (Horovod's sparse allreduce), or reduced dense with ``sparse_as_dense=True``.
    ``process_set``: average over that set's ranks only (a rank outside it steps on its own gradients).
    """
    check_initialized()
    reduce_op = resolve_op(op, None)
    _validate(reduce_op, gradient_predivide_factor, backward_passes_per_step)
    names = _parameter_names(optimizer, named_parameters)
    if num_groups and groups is None:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed in v0.23.0.",
                      DeprecationWarning, stacklevel=2)
        groups = num_groups
    _check_groups(groups)
    outside = isinstance(process_set, ProcessSet) and process_set.included() is False
    channel = None if outside else resolve(process_set, "DistributedOptimizer")
    cls = type(optimizer.__class__.__name__, (_DistributedOptimizer, optimizer.__class__), {})
    wrapped: Any = object.__new__(cls)
    wrapped.__dict__.update(optimizer.__dict__)
    wrapped._parameter_names = names
    wrapped._hvd_reducer = None if channel is None else Reducer(
        plan_buckets(_trainable(optimizer), groups), compression, reduce_op, gradient_predivide_factor,
        sparse_as_dense, backward_passes_per_step, channel)
    wrapped._hvd_groups, wrapped._hvd_synchronized, wrapped._hvd_should_synchronize = groups, False, True
    return wrapped
