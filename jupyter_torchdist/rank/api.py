"""The rank-side API: what training code calls. Works under %%distribute, torchrun and plain Python.

Everything reads the standard torch.distributed environment (RANK, WORLD_SIZE, LOCAL_RANK...), so
a script written for torchrun or Horovod-style code behaves the same under every launcher.
``report`` is a no-op outside a run, so cells can be tried locally first.
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Callable, Iterator

from ..core import contract as C
from ..core.gpus import DEVICE_ENV

__all__ = ["report", "rank", "local_rank", "world_size", "local_world_size", "is_main", "device",
           "barrier", "main_first", "on_main", "commit", "restore", "preempted"]


class _Sink:
    """Set by the rank runtime for the duration of a run; None otherwise."""
    post: Callable[[C.ProgressMsg], None] | None = None
    step: Callable[[int | None], None] | None = None   # --profile's window counts the reports (rank/profiler.py)


_sink = _Sink()


def report(step: int | None = None, total: int | None = None, **metrics: Any) -> None:
    """Send this rank's progress (and any metrics, e.g. ``loss=loss``) to the notebook's view.

    Costs a few microseconds and never blocks or raises: if the kernel is slow, old progress is
    dropped. Tensors are converted to numbers off the training thread.
    """
    post = _sink.post
    if post is None:
        return
    try:
        for key, value in metrics.items():
            detach = getattr(value, "detach", None)
            if detach is not None:  # a loss tensor would keep its whole autograd graph alive until sent
                metrics[key] = detach()
        post({"t": C.PROGRESS, "step": step, "total": total, "metrics": metrics, "at": time.time()})
    except Exception:
        pass
    if _sink.step is not None:
        _sink.step(step)


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def rank() -> int:
    """This process's global rank (0 when not distributed)."""
    return _env_int("RANK", 0)


def local_rank() -> int:
    """This process's rank among the ranks on its host."""
    return _env_int("LOCAL_RANK", 0)


def world_size() -> int:
    return _env_int("WORLD_SIZE", 1)


def local_world_size() -> int:
    return _env_int("LOCAL_WORLD_SIZE", 1)


def is_main() -> bool:
    """True on rank 0: the rank whose value comes back, and the one to checkpoint or download."""
    return rank() == 0


def device() -> Any:
    """This rank's torch device: its own GPU under --gpu (or torchrun on a GPU host), else the CPU."""
    import torch

    name = os.environ.get(DEVICE_ENV)
    if name:
        return torch.device(name)
    if torch.cuda.is_available() and "LOCAL_RANK" in os.environ:
        return torch.device("cuda", local_rank() % torch.cuda.device_count())
    return torch.device("cpu")


def barrier() -> None:
    """Wait for every rank (no-op when not distributed). Under --gpu it waits on the runtime's CPU group: no CUDA
    stream is synchronised for it."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        from .group import cpu_group  # the rank runtime's; None (the default group) outside our ranks

        dist.barrier(group=cpu_group())


@contextlib.contextmanager
def main_first() -> Iterator[None]:
    """Rank 0 runs the block first (a download, a cache build), then the others run it."""
    if not is_main():
        barrier()
    try:
        yield
    finally:
        if is_main():
            barrier()


def on_main(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` on rank 0 only (a checkpoint save) while the others wait; rank 0 gets its value."""
    value = fn(*args, **kwargs) if is_main() else None
    barrier()
    return value


def _commits() -> Any:
    from .runtime import current  # only on a rank: the kernel imports this module for the API alone

    runtime = current()
    return runtime.checkpoints if runtime is not None else None


def commit(step: int, *, every: int | None = None, **objects: Any) -> bool:
    """Save ``objects`` as the state to resume from at ``step`` (rank 0 writes it; every rank calls it).

    ``model=model, optimizer=opt``: anything with ``state_dict()``, or any picklable value (a dict of counters).
    Call it after the step's update. ``every=50`` commits only when ``step`` is a multiple of 50. Returns whether
    this call committed. A commit is atomic (a restart sees the latest complete one) and is written in the
    background; the data position of every ``batches()`` epoch goes with it. Does nothing outside a run with a
    checkpoint folder (``--max-restarts``, ``--checkpoint-dir``): a cell written for restarts runs anywhere.
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"jt.commit: step must be a whole number >= 0, got {step!r}")
    if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
        raise ValueError(f"jt.commit: every must be a whole number >= 1, got {every!r}")
    checkpoints = _commits()
    if checkpoints is None or (every is not None and step % every and not _preemption().commit_is_due()):
        return False
    checkpoints.commit(step, objects)
    return True


def _preemption() -> Any:
    from . import preemption  # only on a rank

    return preemption


def preempted() -> bool:
    """Whether a rank of this run was told to go (SIGTERM: a spot reclaim, a node drained, ``kill``): it ends
    ``JUPYTER_TORCHDIST_PREEMPT_GRACE_S`` seconds (25) after the notice, and every rank hears of it. Meanwhile the
    next ``commit`` of each rank is made whatever its ``every``, so a restart (``--max-restarts``) resumes from
    there. False outside a run."""
    from .runtime import current

    return current() is not None and bool(_preemption().noticed())


def restore(**objects: Any) -> int:
    """Load the latest commit into ``objects`` (``model=model, optimizer=opt``: the names given to ``commit``) and
    return its step; 0, with nothing loaded, on a fresh start or outside such a run. Every rank calls it, as it
    calls ``commit``, and gets the same state (the ranks agree on the commit: one that restored first cannot commit
    a newer one before its peers have looked). Objects with ``load_state_dict`` load it, tensors are copied into,
    dicts, lists and sets are refilled in place; anything else cannot be restored (commit it inside a dict). Call it
    once, after building the objects and before the loop: ``batches()`` epochs then resume where the commit left
    them (an epoch read to its end yields nothing, the one in progress its remaining batches)."""
    checkpoints = _commits()
    return 0 if checkpoints is None else int(checkpoints.restore(objects))
