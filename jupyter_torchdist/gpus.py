"""Which GPU each rank gets. Pure rules, no pyspark, so every launcher (and its tests) can share them.

A cluster task is handed its GPU by Spark's scheduler (the task's ``gpu`` resource addresses).
On the kernel's own machine (a ``local[N]`` master, or ``--local``) nobody schedules GPUs, so
ranks take the kernel's visible GPUs in rank order, as TorchDistributor does on a local master.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

__all__ = ["visible_gpus", "parse_visible_devices", "pick_gpu", "require_local_gpus", "NoGpuError"]


class NoGpuError(RuntimeError):
    """A rank was asked to use a GPU but none is there for it; the message says what to configure."""


def parse_visible_devices(value: str) -> list[str]:
    """The devices a CUDA_VISIBLE_DEVICES value exposes, as CUDA reads it.

    CUDA stops at the first invalid entry, so ``"-1"`` hides every GPU and ``"0,-1,1"`` shows only 0;
    ``""`` shows none. Entries are kept as written (indexes or ``GPU-...`` UUIDs): a rank's
    CUDA_VISIBLE_DEVICES is set to one of them, which means the same device in the child.
    """
    out: list[str] = []
    for entry in value.split(","):
        entry = entry.strip()
        if not entry or (entry.lstrip("-").isdigit() and int(entry) < 0):
            break
        out.append(entry)
    return out


def visible_gpus(env: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs this process may hand out: CUDA_VISIBLE_DEVICES if set, else every GPU torch sees."""
    env = os.environ if env is None else env
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is not None:
        return parse_visible_devices(value)
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:
        return []


def pick_gpu(rank: int, resources: Mapping[str, Any] | None, local_gpus: Sequence[str] | None) -> str:
    """Rank ``rank``'s GPU: a cluster task's own from its resources; on the kernel's host, by rank.

    By rank, not modulo: two NCCL ranks on one GPU fail late and obscurely, so a missing GPU is an
    error here (launchers check the count before starting, this is the last line of defence).
    """
    res = resources.get("gpu") if resources else None
    addresses = [str(a) for a in (getattr(res, "addresses", None) or [])]
    if addresses:
        return addresses[0]
    if local_gpus:
        if rank < len(local_gpus):
            return str(local_gpus[rank])
        raise NoGpuError(f"rank {rank} has no GPU of its own: only {len(local_gpus)} visible "
                         f"({', '.join(local_gpus)}); use at most {len(local_gpus)} ranks with --gpu")
    raise NoGpuError("this task has no GPU: set spark.task.resource.gpu.amount=1 and "
                     "spark.executor.resource.gpu.amount (with spark.executor.resource.gpu.discoveryScript) "
                     "on the cluster")


def require_local_gpus(n: int) -> list[str]:
    """The kernel's visible GPUs, refusing before launch when there are fewer than ``n`` ranks."""
    from .errors import LaunchError

    gpus = visible_gpus()
    if len(gpus) < n:
        raise LaunchError(
            f"--gpu with -n {n} needs {n} GPUs, but this machine shows {len(gpus)} "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}). "
            "Drop --gpu to train on the CPU with gloo, or use fewer ranks.")
    return gpus
