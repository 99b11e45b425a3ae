"""Which collective the rank's main thread is in, and since when: a marker set around torch.distributed's calls.

A hung DDP job is a rank waiting in a collective that a peer never reaches. To say so ("rank 0: waiting in
all_reduce for 31 s"), the rank-side wrappers installed here note the name and start of every collective the
main thread enters (``torch.distributed.all_reduce`` and its kin, and, once a ``DistributedDataParallel`` was
built, ``backward``, where DDP's gradient all_reduce waits) and clear it on the way out. The usage sampler sends
the marker once a second (the kernel's stall rule reads it) and a stack answer names it.

Cost: a thread-identity check, one clock read and two attribute writes per call, well under a microsecond
against a collective's tens of microseconds at the least (``benchmarks/bench_debug.py`` measures steps/s with and
without). Calls from other threads pass through untouched. ``JUPYTER_TORCHDIST_DEBUG=0`` on the ranks leaves
torch as it is.
"""
from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Final

__all__ = ["install", "uninstall", "current", "COLLECTIVES", "DISABLE_ENV"]

DISABLE_ENV: Final = "JUPYTER_TORCHDIST_DEBUG"
COLLECTIVES: Final = (
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor", "all_gather_coalesced",
    "all_gather_object", "all_to_all", "all_to_all_single", "barrier", "monitored_barrier", "broadcast",
    "broadcast_object_list", "gather", "gather_object", "reduce", "reduce_scatter", "reduce_scatter_tensor",
    "scatter", "scatter_object_list", "send", "recv", "send_object_list", "recv_object_list", "batch_isend_irecv",
)
_DDP_BACKWARD: Final = "backward (DDP's gradient all_reduce)"


class _Marker:
    """What the main thread is in. Written by the main thread only; read (racily, harmlessly) by others."""

    main: int | None = None     # the thread whose calls are marked
    name: str | None = None
    since: float = 0.0          # time.monotonic() when it entered
    ddp: bool = False           # a DistributedDataParallel was built: backward waits for its all_reduce


_marker = _Marker()
_originals: dict[tuple[Any, str], Any] = {}


def current() -> tuple[str, float] | None:
    """(the collective the main thread is in, seconds in it so far), or None."""
    name, since = _marker.name, _marker.since
    return None if name is None else (name, max(0.0, time.monotonic() - since))


def _marked(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        m = _marker
        if m.name is not None or threading.get_ident() != m.main:
            return fn(*args, **kwargs)  # nested (all_gather_object calls all_gather): the outer call names it
        m.since, m.name = time.monotonic(), name
        try:
            return fn(*args, **kwargs)
        finally:
            m.name = None
    return call


def _backward(fn: Callable[..., Any]) -> Callable[..., Any]:
    marked = _marked(_DDP_BACKWARD, fn)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        return marked(*args, **kwargs) if _marker.ddp else fn(*args, **kwargs)
    return call


def _ddp_init(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def init(*args: Any, **kwargs: Any) -> None:
        fn(*args, **kwargs)
        _marker.ddp = True
    return init


def _replace(owner: Any, attr: str, wrap: Callable[[Any], Any]) -> None:
    fn = getattr(owner, attr, None)
    if fn is None or (owner, attr) in _originals:
        return
    _originals[(owner, attr)] = fn
    setattr(owner, attr, wrap(fn))


def install(main: int | None = None) -> bool:
    """Mark the collectives ``main`` (default: this thread) makes; False when switched off or torch is missing."""
    if os.environ.get(DISABLE_ENV, "1") == "0":
        return False
    try:
        import torch.autograd
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d
        from torch.nn.parallel import DistributedDataParallel
    except Exception:
        return False
    _marker.main = threading.get_ident() if main is None else main
    for name in COLLECTIVES:
        for owner in (dist, c10d):  # torch's own calls between collectives go through c10d's globals
            _replace(owner, name, functools.partial(_marked, name))
    _replace(torch.autograd, "backward", _backward)
    _replace(DistributedDataParallel, "__init__", _ddp_init)
    return True


def uninstall() -> None:
    """Put torch back as it was (benchmarks compare with and without)."""
    for (owner, attr), fn in list(_originals.items()):
        setattr(owner, attr, fn)
    _originals.clear()
    _marker.name, _marker.ddp = None, False
