"""DistributedOptimizer: the wrapped optimizer's own class, with gradients averaged across ranks before step().

As in Horovod, the result is an instance of a subclass of the optimizer's class (same name, ``isinstance``
holds, LR schedulers accept it). Unlike Horovod it is not rebuilt from ``param_groups`` with the class defaults:
it shares the wrapped optimizer's param_groups, state, defaults and hooks, so nothing the user configured is
lost. The gradient communication lives in ``_reducer.Reducer``. With ``process_set=``, gradients are averaged over
that set's ranks; on a rank outside the set the optimizer steps on its own gradients, as in Horovod.
"""
from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from ._basics import check_initialized
from ._buckets import plan_buckets
from ._reducer import Reducer
from ._compression import Compression, Compressor
from ._ops import Average, ReduceOp, resolve_op
from ._process_sets import ProcessSet, global_process_set, resolve

__all__ = ["DistributedOptimizer"]


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

    Gradients are allreduced in buckets while backward runs (see ``_reducer``). With
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
