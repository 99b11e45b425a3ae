"""The workloads every benchmark runs, identical under every launcher.

Each function works under ``jupyter_torchdist`` (process group already up), torchrun,
pyspark's TorchDistributor and Accelerate's notebook_launcher (which only set the env vars:
the function opens the group itself and closes only what it opened).

The benchmark scripts register this module with ``cloudpickle.register_pickle_by_value``, so
Spark's Python workers never need to import it.
"""
from __future__ import annotations

import os
import time
from typing import Any


def _ensure_group(backend: str = "gloo") -> bool:
    """Open the group from the env if the launcher has not (torchrun); True if we opened it."""
    import torch.distributed as dist

    if dist.is_initialized():
        return False
    if backend == "nccl":
        import torch

        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend)
    return True


def _close_group(opened: bool) -> None:
    import torch.distributed as dist

    if opened and dist.is_initialized():
        dist.destroy_process_group()


def trivial_ddp(steps: int = 10) -> dict[str, Any]:
    """Issue #3's trivial job: Linear(10, 1), ``steps`` DDP steps on gloo."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    t0 = time.perf_counter()
    opened = _ensure_group()
    t1 = time.perf_counter()
    try:
        torch.manual_seed(0)
        model = DDP(torch.nn.Linear(10, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x, y = torch.randn(32, 10), torch.randn(32, 1)
        for _ in range(steps):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
        return {"rank": dist.get_rank(), "world": dist.get_world_size(), "loss": loss.item(), "pid": os.getpid(),
                "init_s": t1 - t0 if opened else 0.0, "fn_s": time.perf_counter() - t1}
    finally:
        _close_group(opened)


def with_payload(blob: Any) -> int:
    """The trivial job plus a captured tensor (the payload-size benchmark): returns its size."""
    trivial_ddp()
    return int(blob.numel() * blob.element_size())


# -- steady-state throughput ------------------------------------------------------------------------
def _model(kind: str) -> tuple[Any, Any, Any]:
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(1234)
    if kind == "mlp":
        model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
        x = torch.randn(128, 256, generator=g)
    elif kind == "cnn":
        model = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 8 * 8, 10))
        x = torch.randn(32, 3, 32, 32, generator=g)
    else:
        raise ValueError(kind)
    y = torch.randint(0, 10, (x.shape[0],), generator=g)
    return model, x, y


def timed_steps(model: Any, opt: Any, x: Any, y: Any, steps: int, warmup: int) -> tuple[float, float]:
    """Train ``steps`` steps on (x, y); (steps/s of steps ``warmup``..``steps``, timed after a barrier; last loss).
    On a GPU the clock starts and stops with the device's queue drained."""
    import torch
    import torch.distributed as dist

    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    loss_fn = torch.nn.CrossEntropyLoss()
    t0 = time.perf_counter()
    loss = torch.zeros(())
    for step in range(steps):
        if step == warmup:
            sync()
            dist.barrier()
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    sync()
    return (steps - warmup) / (time.perf_counter() - t0), loss.item()


def throughput(kind: str = "mlp", steps: int = 200, warmup: int = 20, threads: int | None = None) -> dict[str, Any]:
    """A DDP training loop; times only steps ``warmup``..``steps`` and returns steps/s.

    ``threads``: torch.set_num_threads for the loop (None keeps what the launcher set).
    """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    opened = _ensure_group()
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        torch.manual_seed(0)
        model, x, y = _model(kind)
        model = DDP(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        rate, loss = timed_steps(model, opt, x, y, steps, warmup)
        return {"rank": dist.get_rank(), "kind": kind, "steps_per_s": rate,
                "threads": torch.get_num_threads(), "loss": loss,
                "omp_env": os.environ.get("OMP_NUM_THREADS")}
    finally:
        _close_group(opened)


# -- reporting cost -----------------------------------------------------------------------------------
def report_cost(mode: str = "none", steps: int = 2000, work: int = 64) -> dict[str, Any]:
    """A cheap training-like loop; ``mode``: none, report (jupyter_torchdist.report each step) or tqdm.

    Returns the mean step time and, for 'report', the µs spent inside report() itself.
    """
    import torch

    import jupyter_torchdist

    torch.manual_seed(0)
    a = torch.randn(work, work)
    report_s = 0.0
    report_max = 0.0
    it: Any = range(steps)
    if mode == "tqdm":
        from tqdm.auto import tqdm

        it = tqdm(range(steps), desc="train")
    t0 = time.perf_counter()
    for step in it:
        b = a @ a
        loss = float(b[0, 0])
        if mode == "report":
            r0 = time.perf_counter()
            jupyter_torchdist.report(step=step, total=steps, loss=loss)
            dt = time.perf_counter() - r0
            report_s += dt
            report_max = max(report_max, dt)
    elapsed = time.perf_counter() - t0
    if mode == "tqdm":
        it.close()
    return {"mode": mode, "steps": steps, "step_us": elapsed / steps * 1e6,
            "report_us": report_s / steps * 1e6 if mode == "report" else None,
            "report_max_us": report_max * 1e6 if mode == "report" else None}


def report_flood(rate_hz: float = 1000.0, seconds: float = 3.0) -> dict[str, Any]:
    """report() at ``rate_hz`` for ``seconds`` (paced), to count the front end's redraws."""
    import jupyter_torchdist

    period = 1.0 / rate_hz
    n = int(rate_hz * seconds)
    start = time.perf_counter()
    worst = 0.0
    for step in range(n):
        r0 = time.perf_counter()
        jupyter_torchdist.report(step=step, total=n, loss=1.0 / (step + 1))
        worst = max(worst, time.perf_counter() - r0)
        target = start + (step + 1) * period
        delay = target - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    elapsed = time.perf_counter() - start
    return {"sent": n, "seconds": elapsed, "achieved_hz": n / elapsed, "worst_report_us": worst * 1e6}


# -- GPU ----------------------------------------------------------------------------------------------
def gpu_throughput(steps: int = 300, warmup: int = 30) -> dict[str, Any]:
    """NCCL DDP on this rank's GPU: an MLP big enough to keep the GPU busy; steps/s of the steady state."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    opened = _ensure_group("nccl")
    try:
        dev = torch.device("cuda", torch.cuda.current_device())
        model = nn.Sequential(nn.Linear(2048, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                              nn.Linear(4096, 10)).to(dev)
        model = DDP(model, device_ids=[dev.index])
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(256, 2048, device=dev)
        y = torch.randint(0, 10, (256,), device=dev)
        rate, loss = timed_steps(model, opt, x, y, steps, warmup)
        return {"rank": dist.get_rank(), "steps_per_s": rate, "loss": loss}
    finally:
        _close_group(opened)


def gpu_trivial(steps: int = 10) -> dict[str, Any]:
    """The trivial job on CUDA with NCCL (launch-latency benchmark)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    opened = _ensure_group("nccl")
    try:
        dev = torch.device("cuda", torch.cuda.current_device())
        model = DDP(torch.nn.Linear(10, 1).to(dev), device_ids=[dev.index])
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x, y = torch.randn(32, 10, device=dev), torch.randn(32, 1, device=dev)
        for _ in range(steps):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
        return {"rank": dist.get_rank(), "loss": loss.item()}
    finally:
        _close_group(opened)
