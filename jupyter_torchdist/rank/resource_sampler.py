"""Where a rank's time goes, sampled about once a second: CPU, memory, its GPU, and waiting for data.

A thread of its own reads cheap counters (``os.times``, ``/proc/self/statm``; under ``--gpu`` torch's
allocator and, when NVML is there, the GPU's utilisation; the collective the main thread is in, if any) and
leaves the latest reading with the rank's client, which sends it with whatever goes next: a reading never
queues behind another. CUDA is never initialised here: GPU numbers appear once the training code has touched
the GPU.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable, Final

from ..core import contract as C
from . import collectives

__all__ = ["UsageSampler", "INTERVAL_S", "read_usage"]

INTERVAL_S: Final = 1.0
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def _gpu() -> tuple[float | None, int | None]:
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_initialized():
            return None, None
        memory = int(torch.cuda.memory_reserved())
    except Exception:
        return None, None
    try:
        return float(torch.cuda.utilization()), memory  # needs NVML (the nvidia-ml-py package)
    except Exception:
        return None, memory


def _data() -> tuple[float, float, int] | None:
    batches = sys.modules.get("jupyter_torchdist.data.batches")
    return batches.cell_numbers() if batches is not None else None


def read_usage(last: tuple[float, float] | None, gpu: bool) -> tuple[C.UsageMsg, tuple[float, float]]:
    """One reading, and the (wall, cpu) mark the next one measures CPU use from."""
    t = os.times()
    now, cpu = time.monotonic(), t.user + t.system
    msg: C.UsageMsg = {"t": C.USAGE, "at": time.time(), "rss": _rss()}
    if last is not None and now > last[0]:
        msg["cpu_pct"] = round(100.0 * (cpu - last[1]) / (now - last[0]), 1)
    if gpu:
        msg["gpu_util"], msg["gpu_mem"] = _gpu()
    data = _data()
    if data is not None:
        msg["wait_s"], msg["data_s"], msg["rows"] = round(data[0], 3), round(data[1], 3), data[2]
    marked = collectives.current()  # the kernel's stall rule: a rank long in a collective, nobody progressing
    if marked is not None:
        msg["collective"], msg["collective_s"] = marked[0], round(marked[1], 3)
    return msg, (now, cpu)


class UsageSampler:
    """Samples every ``INTERVAL_S`` and hands each reading to ``post`` (which keeps only the latest)."""

    def __init__(self, post: Callable[[C.UsageMsg], None], *, gpu: bool) -> None:
        self._post, self._gpu = post, gpu
        self._stop = threading.Event()
        self._lock = threading.Lock()
        _, self._mark = read_usage(None, False)
        threading.Thread(target=self._run, name="jtd-usage", daemon=True).start()

    def sample(self) -> None:
        """Take a reading now (the end of a cell: the report keeps its last numbers)."""
        try:
            with self._lock:
                msg, self._mark = read_usage(self._mark, self._gpu)
            self._post(msg)
        except Exception:
            pass  # numbers for the view are never worth disturbing the rank

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL_S):
            self.sample()

    def stop(self) -> None:
        self._stop.set()
