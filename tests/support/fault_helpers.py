"""Rank functions for the fault, soak and security tests (pickled by value: ranks cannot import tests).

Every function leaves a marker per rank (JSON: pid, ppid = the Spark task's agent, time) so a test can
find the rank and agent processes of one run and check that none of them outlives it.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any

__all__ = ["mark", "read_markers", "quick", "raise_on", "die_on", "block", "wait_for_go", "big_value",
           "wait_for_markers"]


def mark(marker_dir: str | None, **extra: Any) -> None:
    """Write this rank's marker atomically (a reader never sees half a file)."""
    if not marker_dir:
        return
    import torch.distributed as dist

    rank = dist.get_rank()
    info = {"rank": rank, "pid": os.getpid(), "ppid": os.getppid(), "t": time.time(), **extra}
    path = os.path.join(marker_dir, f"rank-{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(info, f)
    os.replace(path + ".tmp", path)


def read_markers(marker_dir: str) -> dict[int, dict[str, Any]]:
    out = {}
    for name in os.listdir(marker_dir):
        if name.startswith("rank-") and name.endswith(".json"):
            with open(os.path.join(marker_dir, name)) as f:
                info = json.load(f)
            out[int(info["rank"])] = info
    return out


def wait_for_markers(marker_dir: str, n: int, timeout: float = 60.0) -> dict[int, dict[str, Any]]:
    """Test-side: poll until all n ranks have written their marker."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = read_markers(marker_dir)
        if len(found) >= n:
            return found
        time.sleep(0.02)
    raise TimeoutError(f"only {sorted(read_markers(marker_dir))} of {n} ranks started within {timeout}s")


def quick(marker_dir: str | None = None) -> int:
    """A tiny collective job: every rank marks, all_reduce of the ranks, the sum comes back."""
    import torch
    import torch.distributed as dist

    mark(marker_dir)
    t = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(t)
    return int(t.item())


def raise_on(bad_rank: int, marker_dir: str | None = None, delay: float = 0.2) -> str:
    """``bad_rank`` raises; the others block in all_reduce, waiting for it, then would sleep."""
    import torch
    import torch.distributed as dist

    mark(marker_dir)
    if dist.get_rank() == bad_rank:
        time.sleep(delay)
        mark(marker_dir, raising_at=time.time())
        raise ValueError(f"boom on rank {bad_rank}")
    t = torch.ones(1)
    dist.all_reduce(t)
    time.sleep(120)
    return "unreachable"


def die_on(bad_rank: int, how: str, marker_dir: str | None = None, delay: float = 0.2) -> str:
    """``bad_rank`` dies hard (os._exit, a real segfault, SIGKILL); the others block in all_reduce."""
    import ctypes
    import signal

    import torch
    import torch.distributed as dist

    mark(marker_dir)
    if dist.get_rank() == bad_rank:
        time.sleep(delay)
        mark(marker_dir, dying_at=time.time())
        if how == "exit":
            os._exit(7)
        if how == "segv":
            ctypes.string_at(0)  # reads address 0: SIGSEGV in C, no Python exception
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError(f"unknown way to die: {how}")
    t = torch.ones(1)
    dist.all_reduce(t)
    time.sleep(120)
    return "unreachable"


def block(marker_dir: str | None = None) -> None:
    """Every rank marks, then runs until stopped (in a Python loop, like a training loop)."""
    mark(marker_dir)
    while True:
        time.sleep(0.05)


def wait_for_go(marker_dir: str) -> int:
    """Every rank marks, waits until the test creates ``go`` in the marker folder, then all_reduce."""
    import torch
    import torch.distributed as dist

    mark(marker_dir)
    while not os.path.exists(os.path.join(marker_dir, "go")):
        time.sleep(0.02)
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    return int(t.item())


def big_value(megabytes: float) -> bytes:
    return b"x" * int(megabytes * (1 << 20))
