"""Rank functions used by the integration tests (importable, so they pickle by reference too)."""
from __future__ import annotations

import os
import time


def ddp_train(steps: int = 10):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import jupyter_torchdist as jt

    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(10, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for i in range(steps):
        g = torch.Generator().manual_seed(1000 * dist.get_rank() + i)
        x = torch.randn(16, 10, generator=g)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        jt.report(step=i + 1, total=steps, loss=loss)
        losses.append(loss.item())
    w = model.module.weight.detach().clone()
    return {"rank": dist.get_rank(), "world": dist.get_world_size(), "losses": losses, "weight": w,
            "env": {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                "MASTER_ADDR", "MASTER_PORT", "HOROVOD_RANK", "HOROVOD_SIZE",
                                                "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK",
                                                "HOROVOD_CROSS_SIZE")}}


def fail_on(rank_to_fail: int, how: str = "raise"):
    import torch
    import torch.distributed as dist

    if dist.get_rank() == rank_to_fail:
        time.sleep(0.3)
        if how == "raise":
            raise ValueError(f"boom on rank {rank_to_fail}")
        if how == "exit":
            os._exit(7)
        if how == "kill":
            os.kill(os.getpid(), 9)
    t = torch.ones(1)
    dist.all_reduce(t)  # the healthy ranks block here until the peer dies
    time.sleep(60)
    return "unreachable"


def sleep_forever(marker_dir: str):
    import torch.distributed as dist

    with open(os.path.join(marker_dir, f"pid-{dist.get_rank()}"), "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(0.05)


def store_after_rank0_is_done(delay: float = 0.5):
    """Rank 0 ends at once; rank 1 still needs what rank 0 hosts (the TCPStore) a moment later."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _get_default_store

    store = _get_default_store()
    if dist.get_rank() == 0:
        store.set("jtd-test-key", "from rank 0")
        return "rank 0 done"
    time.sleep(delay)
    return store.get("jtd-test-key").decode()


def module_value(name: str):
    """``VALUE`` of module ``name``, imported on the rank (a module of the notebook's folder)."""
    import importlib

    return importlib.import_module(name).VALUE
