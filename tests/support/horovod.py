"""Rank functions and models shared by the Horovod tests (pickled by value: the ranks cannot import tests)."""
from __future__ import annotations

import os

import torch

__all__ = ["RUN", "Net", "batch_loss", "fails_on_rank_one", "make_net", "make_optimizer", "where"]


RUN = {"local": True, "all_ranks": True, "timeout": 120}


class Net(torch.nn.Module):
    def __init__(self, extra: bool) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        self.extra = torch.nn.Linear(6, 1) if extra else None  # used on rank 0 only: None grads elsewhere

    def forward(self, x: torch.Tensor, use_extra: bool) -> torch.Tensor:
        y = self.body(x)
        return y + self.extra(x) if use_extra and self.extra is not None else y


def make_net(extra: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)  # the same start on every rank, as after a broadcast
    return Net(extra)


def batch_loss(net: torch.nn.Module, rank: int, step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * rank + step)
    x = torch.randn(8, 6, generator=g)
    return ((net(x, use_extra=rank == 0) - x.sum(1, keepdim=True)) ** 2).mean()


def make_optimizer(kind: str, params) -> torch.optim.Optimizer:
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    return torch.optim.Adam(params, lr=0.01)


def where(base: float, scale: float = 1.0) -> dict:
    """Horovod-style: init, one allreduce, the rank's own view of the world and of its environment."""
    import torch

    import jupyter_torchdist.horovod as hvd

    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum).item()
    print(f"hello from rank {hvd.rank()} of {hvd.size()}", flush=True)
    return {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(), "value": (base + total) * scale,
            "env": os.environ.get("HVD_SPARK_TEST"), "pid": os.getpid()}


def fails_on_rank_one() -> int:
    import jupyter_torchdist.horovod as hvd

    hvd.init()
    if hvd.rank() == 1:
        raise KeyError("lost-batch-on-rank-one")
    hvd.barrier()
    return hvd.rank()
