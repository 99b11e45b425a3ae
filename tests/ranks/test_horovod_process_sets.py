"""Process sets on real ranks: add/remove on every rank, each collective restricted to a set (with the set's rank,
size and Average), a rank outside a set refused as Horovod refuses it, barrier and DistributedOptimizer on a set,
static sets from init(process_sets=...)."""
from __future__ import annotations

import sys

import cloudpickle

import jupyter_torchdist as jt
import jupyter_torchdist.horovod as hvd

from ..support.horovod import RUN

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the rank functions below travel by value


def _outside(call) -> str:
    try:
        call()
    except hvd.HorovodInternalError as exc:
        return str(exc)
    return "no error"


def _on_sets(out: dict, r: int, even, odd) -> None:
    """Every collective on the rank's own set: values from the set's ranks only."""
    import torch

    mine = even if r % 2 == 0 else odd
    out["set"] = (mine.process_set_id, mine.ranks, mine.size(), mine.rank(), mine.included())
    x = torch.full((2,), float(r))
    out["allreduce"] = hvd.allreduce(x, op=hvd.Sum, process_set=mine).tolist()
    out["average"] = hvd.allreduce(x, process_set=mine).tolist()  # divides by the set's size
    out["grouped"] = [t.tolist() for t in hvd.grouped_allreduce([x, x[:1]], op=hvd.Sum, process_set=mine)]
    out["allgather"] = hvd.allgather(torch.tensor([r]), process_set=mine).tolist()
    out["broadcast"] = hvd.broadcast(torch.tensor([r]), mine.ranks[-1], process_set=mine).tolist()
    out["alltoall"] = hvd.alltoall(torch.tensor([r] * mine.size()), process_set=mine).tolist()
    out["reducescatter"] = hvd.reducescatter(torch.arange(4.0) * (r + 1), op=hvd.Sum, process_set=mine).tolist()
    out["object"] = hvd.allgather_object({"r": r}, process_set=mine)
    hvd.barrier(process_set=mine)
    other = odd if mine is even else even
    out["outside"] = _outside(lambda: hvd.allreduce(x, process_set=other))
    try:
        out["outside-rank"] = other.rank()
    except ValueError as exc:
        out["outside-rank"] = str(exc)


def _optimizer(out: dict, r: int, even) -> None:
    """DistributedOptimizer(process_set=even): the even ranks average; the odd rank steps on its own gradient."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1, bias=False)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0), process_set=even)
    (model(torch.full((1, 2), float(r + 1))).sum()).backward()
    before = model.weight.detach().clone()
    opt.step()
    out["step"] = (before - model.weight.detach()).tolist()


def process_sets() -> dict:
    import torch

    hvd.init()
    r, n = hvd.rank(), hvd.size()
    even = hvd.add_process_set([k for k in range(n) if k % 2 == 0])
    odd = hvd.add_process_set(hvd.ProcessSet([k for k in range(n) if k % 2]))
    out: dict = {"global": (hvd.global_process_set.ranks, hvd.global_process_set.size())}
    try:
        hvd.add_process_set(even.ranks)
        out["duplicate"] = "no error"
    except ValueError as exc:
        out["duplicate"] = str(exc)
    _on_sets(out, r, even, odd)
    _optimizer(out, r, even)
    out["removed"] = (hvd.remove_process_set(odd), hvd.remove_process_set(odd), odd.process_set_id)
    out["removed-use"] = _outside(lambda: hvd.barrier(process_set=odd))
    out["remove-global"] = hvd.remove_process_set(hvd.global_process_set)
    hvd.shutdown()
    static = hvd.ProcessSet([0, n - 1])
    hvd.init(process_sets=[static])
    total = hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=static).item() if static.included() else None
    out["static"] = (static.process_set_id, total)
    return out


def test_process_sets():
    n = 3
    values = jt.run(process_sets, n=n, **RUN)
    for r, out in enumerate(values):
        sets = {0: [0, 2], 1: [1]}
        ranks = sets[r % 2]
        assert out["global"] == ([0, 1, 2], 3)
        assert "Attempted to add a duplicate process set" in out["duplicate"]
        assert out["set"] == (1 + r % 2, ranks, len(ranks), ranks.index(r), True)
        assert out["allreduce"] == [float(sum(ranks))] * 2
        assert out["average"] == [sum(ranks) / len(ranks)] * 2
        assert out["grouped"] == [[float(sum(ranks))] * 2, [float(sum(ranks))]]
        assert out["allgather"] == ranks and out["broadcast"] == [ranks[-1]] and out["alltoall"] == ranks
        size = len(ranks)
        total = [float(sum(k + 1 for k in ranks) * v) for v in range(4)]
        rows = [4 // size + (1 if i < 4 % size else 0) for i in range(size)]
        start = sum(rows[:ranks.index(r)])
        assert out["reducescatter"] == total[start:start + rows[ranks.index(r)]]
        assert out["object"] == [{"r": k} for k in ranks]
        assert f"rank {r} is not a member of the provided process set" in out["outside"]
        assert out["outside-rank"] == "Process is not part of provided process set."
        assert out["removed"] == (True, False, None) and "does not exist, or has not been registered" in \
            out["removed-use"] and out["remove-global"] is False
        assert out["static"] == (1, 2.0 if r in (0, 2) else None)
    grads = {r: [float(r + 1)] * 2 for r in range(n)}  # d(w.x)/dw = x; lr 1
    assert values[0]["step"] == values[2]["step"] == [[(grads[0][0] + grads[2][0]) / 2] * 2]
    assert values[1]["step"] == [grads[1]]
