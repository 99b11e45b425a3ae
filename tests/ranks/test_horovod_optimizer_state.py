"""DistributedOptimizer on real ranks, beyond dense gradients: broadcast_optimizer_state with a frozen parameter
(Horovod's state initialisation: zero gradients on the trainable parameters, None on the frozen ones), sparse
gradients (allgathered, or dense with sparse_as_dense=True) against a one-process reference, and the parameter
names Horovod gives parameters without named_parameters."""
from __future__ import annotations

import sys

import cloudpickle
import torch

import jupyter_torchdist as jt
import jupyter_torchdist.horovod as hvd

from ..support.horovod import RUN

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the rank functions below travel by value


class _Frozen(torch.nn.Module):
    """Horovod's test model: an integer index parameter that is frozen, and a trainable vector."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor([1, 3], dtype=torch.int32), requires_grad=False)
        self.b = torch.nn.Parameter(torch.rand(4))


def frozen() -> dict:
    hvd.init()
    torch.manual_seed(hvd.rank())  # the ranks start apart
    model = _Frozen()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=0.5, momentum=0.9),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    before = model.b.detach().clone()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    grads = [p.grad for p in opt.param_groups[0]["params"]]
    out = {"grads": [None if g is None else g.tolist() for g in grads], "b-kept": torch.equal(model.b, before),
           "state": {k: v.tolist() for k, v in opt.state[model.b].items()}}
    out["bcast-grad"] = hvd.broadcast(grads[1], root_rank=0).tolist()  # Horovod's test: it is a tensor now
    return out


def test_broadcast_optimizer_state_with_a_frozen_parameter():
    values = jt.run(frozen, n=2, **RUN)
    for out in values:
        assert out["grads"] == [None, [0.0] * 4] and out["bcast-grad"] == [0.0] * 4
        assert out["b-kept"]  # the weight-decay step on zero gradients did not move the parameter
        assert out["state"] == values[0]["state"] and set(out["state"]) == {"momentum_buffer"}


def _embedding_grads(rank: int) -> torch.Tensor:
    return torch.tensor([[1, 2, 4, 5], [4, 3, 2, 9]]) if rank == 0 else torch.tensor([[1, 3, 4], [4, 7, 9]])


def sparse(sparse_as_dense: bool) -> list:
    hvd.init()
    torch.manual_seed(0)
    model = torch.nn.Embedding(10, 3, sparse=True)
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(model.parameters()), lr=0.1),
                                   sparse_as_dense=sparse_as_dense)
    for _ in range(3):
        opt.zero_grad()
        model(_embedding_grads(hvd.rank())).sum().backward()
        opt.step()
    return model.weight.detach().tolist()


def _reference(n: int) -> list:
    """One process: SparseAdam on the ranks' averaged gradient (every entry positive, so the rows match)."""
    torch.manual_seed(0)
    model = torch.nn.Embedding(10, 3, sparse=True)
    opt = torch.optim.SparseAdam(list(model.parameters()), lr=0.1)
    for _ in range(3):
        grads = []
        for rank in range(n):
            model.zero_grad()
            model(_embedding_grads(rank)).sum().backward()
            grads.append(model.weight.grad.to_dense())
        model.weight.grad = (sum(grads) / n).to_sparse()
        opt.step()
    return model.weight.detach().tolist()


def test_sparse_gradients_are_averaged_as_horovod_does():
    want = torch.tensor(_reference(2))
    for sparse_as_dense in (False, True):
        for got in jt.run(sparse, sparse_as_dense, n=2, **RUN):
            assert torch.allclose(torch.tensor(got), want, atol=1e-6), sparse_as_dense


def names() -> dict:
    hvd.init()
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([{"params": model[0].parameters()},
                                                    {"params": model[1].parameters()}], lr=0.1))
    return {"names": sorted(opt._parameter_names.values()), "every-rank": hvd.allgather_object(
        sorted(opt._parameter_names.values()))}


def test_parameter_names_without_named_parameters():
    for out in jt.run(names, n=2, **RUN):
        assert out["names"] == [f"allreduce.noname.{i}.{j}" for i in range(2) for j in range(2)]
        assert out["every-rank"] == [out["names"]] * 2
