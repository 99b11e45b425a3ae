"""hvd.join on real ranks with uneven data: a joined rank serves the others' gradient rounds."""
from __future__ import annotations

import sys

import cloudpickle
import pytest
import torch

import jupyter_torchdist as jt
import jupyter_torchdist.horovod as hvd

from ..support import horovod as shared
from ..support.horovod import RUN, batch_loss, make_net, make_optimizer

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the rank functions below travel by value
cloudpickle.register_pickle_by_value(shared)  # and the models and losses they share


def _simulate(batches: list[int]) -> list[list[torch.Tensor]]:
    """Horovod's join semantics computed in one process: a joined rank adds zeros, the average divides by size."""
    model = make_net()
    opt = make_optimizer("sgd", model.parameters())
    snapshots: dict[int, list[torch.Tensor]] = {}
    for step in range(max(batches)):
        grads = [torch.zeros_like(p) for p in model.parameters()]
        for rank, count in enumerate(batches):
            if step < count:
                model.zero_grad()
                batch_loss(model, rank, step).backward()
                grads = [g + p.grad for g, p in zip(grads, model.parameters())]
        for p, g in zip(model.parameters(), grads):
            p.grad = g / len(batches)
        opt.step()
        snapshots[step + 1] = [p.detach().clone() for p in model.parameters()]
    return [snapshots[count] for count in batches]


def join_uneven(batches: list[int], groups: int | None = None) -> dict:
    import torch.distributed as dist

    hvd.init()
    r, n = hvd.rank(), hvd.size()
    model = make_net()
    opt = hvd.DistributedOptimizer(make_optimizer("sgd", model.parameters()), named_parameters=model.named_parameters(),
                                   groups=groups)
    out: dict = {"buckets": len(opt._hvd_reducer.buckets)}
    for step in range(batches[r]):
        loss = batch_loss(model, r, step)
        loss.backward()
        opt.step()
        opt.zero_grad()
        hvd.allreduce(loss.detach())  # a metric, as Horovod examples do: also served by joined ranks
    if batches[r] == max(batches):  # everyone else has joined by now
        out["mean"] = hvd.allreduce(torch.tensor([float(r + 1)]))
        out["sum"] = hvd.allreduce(torch.tensor([r + 1], dtype=torch.int64), op=hvd.Sum)
        for name, call in (("allgather", lambda: hvd.allgather(torch.ones(1))),
                           ("broadcast", lambda: hvd.broadcast(torch.ones(1), 0)),
                           ("alltoall", lambda: hvd.alltoall(torch.ones(n)))):
            try:
                call()
                out[name] = "no error"
            except hvd.JoinedRankError as exc:
                out[name] = str(exc)
    out["last"] = hvd.join()
    out["after"] = hvd.allgather(torch.tensor([r]))  # all active again: everything works
    out["params"] = [p.detach().clone() for p in model.parameters()]
    out["predicted"] = _simulate(batches)[r]
    out["dist-still-up"] = dist.is_initialized()
    return out


@pytest.mark.parametrize("batches,groups", [([2, 4], None), ([1, 3, 2], None), ([3, 1], 3)])
def test_join_with_uneven_batches(batches, groups):
    """A joined rank serves the others' gradient rounds (one control message per round, every bucket replayed)."""
    values = jt.run(join_uneven, batches, groups, n=len(batches), **RUN)
    n, longest = len(batches), batches.index(max(batches))
    assert values[0]["buckets"] == (groups or values[0]["buckets"]) and (groups is None or groups > 1)
    for out in values:
        assert out["last"] == longest
        assert torch.equal(out["after"], torch.arange(n))
        assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(out["params"], out["predicted"]))
    late = values[longest]
    assert torch.allclose(late["mean"], torch.tensor([(longest + 1) / n]))  # zeros from the joined, / size
    assert torch.equal(late["sum"], torch.tensor([longest + 1]))
    assert "allgather is not supported while a rank has called hvd.join()" in late["allgather"]
    assert "sparse_as_dense=True" in late["allgather"]
    assert "broadcast is not supported" in late["broadcast"] and "alltoall is not supported" in late["alltoall"]
