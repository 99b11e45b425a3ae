"""jupyter_torchdist.horovod on real ranks: every collective (and its autograd, async and in-place forms, and its
refusals) against its torch.distributed equivalent."""
from __future__ import annotations

import os
import sys

import cloudpickle
import pytest
import torch

import jupyter_torchdist as jt
import jupyter_torchdist.horovod as hvd

from ..support.horovod import RUN

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the rank functions below travel by value


def _reductions(out: dict) -> None:
    """allreduce family against dist.all_reduce; integer-valued floats so equality is exact."""
    import torch.distributed as dist

    r, n = dist.get_rank(), dist.get_world_size()
    x = torch.tensor([[1.0, -2.0], [3.0, 4.0]]) * (r + 1)
    ints = torch.tensor([3, -7, 10]) * (r + 1)
    for name, op, dop in [("sum", hvd.Sum, dist.ReduceOp.SUM), ("min", hvd.Min, dist.ReduceOp.MIN),
                          ("max", hvd.Max, dist.ReduceOp.MAX), ("product", hvd.Product, dist.ReduceOp.PRODUCT)]:
        for kind, t in (("f", x), ("i", ints)):
            ref = t.clone()
            dist.all_reduce(ref, op=dop)
            out[f"{name}-{kind}"] = (hvd.allreduce(t, op=op), ref)
    ref = x.clone()
    dist.all_reduce(ref)
    out["average"] = (hvd.allreduce(x), ref / n)
    out["average-flag"] = (hvd.allreduce(x, average=True), ref / n)
    out["sum-flag"] = (hvd.allreduce(x, average=False), ref)
    ref_i = ints.clone()
    dist.all_reduce(ref_i)
    out["average-int"] = (hvd.allreduce(ints), torch.div(ref_i, n, rounding_mode="trunc"))
    out["scaled"] = (hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5), ref)
    inplace = x.clone()
    returned = hvd.allreduce_(inplace, op=hvd.Sum)
    out["inplace"] = (inplace, ref)
    out["inplace-same-object"] = returned is inplace
    handle = hvd.allreduce_async(x, op=hvd.Sum)
    out["async"] = (hvd.synchronize(handle), ref)
    out["async-poll"] = hvd.poll(handle)
    inplace = x.clone()
    out["async-inplace"] = (hvd.synchronize(hvd.allreduce_async_(inplace, op=hvd.Sum)), ref)
    out["x-untouched"] = (x, torch.tensor([[1.0, -2.0], [3.0, 4.0]]) * (r + 1))
    fp16 = hvd.allreduce(x / 3, compression=hvd.Compression.fp16)
    out["fp16-dtype"] = fp16.dtype
    out["fp16-close"] = torch.allclose(fp16, ref / n / 3, rtol=1e-3, atol=1e-3)


def _gathers(out: dict) -> None:
    """allgather/broadcast/alltoall and the object forms against their dist equivalents."""
    import torch.distributed as dist

    r, n = dist.get_rank(), dist.get_world_size()
    mine = torch.arange((r + 1) * 3, dtype=torch.float32).reshape(r + 1, 3) + 100 * r  # first dims differ
    parts: list = [None] * n
    dist.all_gather_object(parts, mine)
    out["allgather"] = (hvd.allgather(mine), torch.cat(parts))
    out["allgather-async"] = (hvd.synchronize(hvd.allgather_async(mine)), torch.cat(parts))
    objs: list = [None] * n
    dist.all_gather_object(objs, {"rank": r, "s": "x" * r})
    out["allgather_object"] = (hvd.allgather_object({"rank": r, "s": "x" * r}), objs)
    root = n - 1
    ref = torch.tensor([r * 10.0, 1.0])
    dist.broadcast(ref, src=root)
    t = torch.tensor([r * 10.0, 1.0])
    out["broadcast"] = (hvd.broadcast(t, root), ref)
    out["broadcast-leaves-input"] = (t, torch.tensor([r * 10.0, 1.0]))
    out["broadcast_"] = (hvd.broadcast_(t.clone(), root), ref)
    out["broadcast-async"] = (hvd.synchronize(hvd.broadcast_async(t, root)), ref)
    box = [{"from": r}]
    dist.broadcast_object_list(box, src=root)
    out["broadcast_object"] = (hvd.broadcast_object({"from": r}, root_rank=root), box[0])
    send = torch.arange(2 * n) + 100 * r
    ref_a = torch.empty_like(send)
    dist.all_to_all_single(ref_a, send)
    out["alltoall"] = (hvd.alltoall(send), ref_a)
    splits = [(i + r) % 3 for i in range(n)]
    rows = torch.arange(sum(splits) * 2).reshape(-1, 2) + 100 * r
    got = [(r + i) % 3 for i in range(n)]  # rank i sends (r + i) % 3 rows here
    ref_s = rows.new_empty((sum(got), 2))
    dist.all_to_all_single(ref_s, rows, got, splits)
    received, rsplits = hvd.alltoall(rows, splits=splits)
    out["alltoall-splits"] = (received, ref_s)
    out["alltoall-rsplits"] = (rsplits, torch.tensor(got, dtype=torch.int32))


def _autograd(out: dict) -> None:
    """Horovod's gradients: allreduce (same op), allgather (my slice of the averaged grad), broadcast (root only)."""
    import torch.distributed as dist

    r, n = dist.get_rank(), dist.get_world_size()
    x = torch.full((2,), float(r), requires_grad=True)
    hvd.allreduce(x, op=hvd.Sum).sum().backward()
    out["grad-allreduce"] = (x.grad, torch.full((2,), float(n)))
    y = torch.ones(r + 1, requires_grad=True)
    weights = torch.arange(float(n * (n + 1) // 2))
    (hvd.allgather(y) * weights).sum().backward()
    start = r * (r + 1) // 2
    out["grad-allgather"] = (y.grad, weights[start:start + r + 1])
    z = torch.ones(3, requires_grad=True)
    hvd.broadcast(z, 0).sum().backward()
    out["grad-broadcast"] = (z.grad, torch.ones(3) if r == 0 else torch.zeros(3))
    w = torch.ones(n, requires_grad=True)  # element i goes to rank i, which weighs what rank r sent by 10 * i + r
    (hvd.alltoall(w) * (10.0 * r + torch.arange(float(n)))).sum().backward()
    out["grad-alltoall"] = (w.grad, 10.0 * torch.arange(float(n)) + r)


def _errors(out: dict) -> None:
    """Refusals that must come at once and alike on every rank."""
    def error_of(fn, *args, **kwargs) -> str:
        try:
            fn(*args, **kwargs)
        except Exception as exc:  # the test inspects it
            return f"{type(exc).__name__}: {exc}"
        return "no error"

    t = torch.ones(2)
    out["err-average-and-op"] = error_of(hvd.allreduce, t, average=True, op=hvd.Sum)
    out["err-adasum"] = error_of(hvd.allreduce, t, op=hvd.Adasum)
    out["err-adasum-optimizer"] = error_of(hvd.DistributedOptimizer, torch.optim.SGD([torch.nn.Parameter(t)]),
                                           op=hvd.Adasum)
    out["err-process-set"] = error_of(hvd.allreduce, t, process_set=object())
    out["err-unregistered-set"] = error_of(hvd.allreduce, t, process_set=hvd.ProcessSet([0]))
    out["ok-global-set"] = error_of(hvd.allreduce, t, process_set=hvd.global_process_set)
    out["err-roots"] = error_of(hvd.broadcast, t, hvd.rank() % 2)
    out["err-shapes"] = error_of(hvd.allgather, torch.ones(1, 2 + hvd.rank()))
    out["err-mpi-threads"] = error_of(hvd.mpi_threads_supported)
    out["after-errors"] = hvd.allreduce(t, op=hvd.Sum)  # the group is still in step


def collectives() -> dict:
    hvd.init()
    hvd.init()  # a no-op the second time
    out: dict = {"size": hvd.size(), "rank": hvd.rank(), "layout": (hvd.local_rank(), hvd.local_size(),
                                                                     hvd.cross_rank(), hvd.cross_size())}
    out["env"] = tuple(int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"))
    _reductions(out)
    _gathers(out)
    _autograd(out)
    _errors(out)
    hvd.barrier()
    hvd.shutdown()  # our launcher owns the group: only forgotten, not destroyed
    import torch.distributed as dist

    out["after-shutdown"] = (hvd.is_initialized(), dist.is_initialized())
    return out


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return a == b


@pytest.mark.parametrize("n", [2, 3])
def test_every_call_matches_torch_distributed(n):
    values = jt.run(collectives, n=n, **RUN)
    for r, out in enumerate(values):
        assert (out["size"], out["rank"]) == (n, r)
        assert out["layout"] == (r, n, 0, 1) and out["env"] == (r, n, r, n)
        pairs = {k: v for k, v in out.items() if isinstance(v, tuple) and len(v) == 2 and k != "after-shutdown"}
        assert len(pairs) > 30
        for key, (got, want) in pairs.items():
            assert _same(got, want), f"rank {r} {key}: {got!r} != {want!r}"
        assert out["inplace-same-object"] and out["async-poll"]
        assert out["fp16-dtype"] == torch.float32 and out["fp16-close"]
        assert out["err-average-and-op"].startswith("ValueError: The op parameter supersedes average")
        assert out["err-adasum"].startswith("HorovodUnsupportedError") and "op=hvd.Average" in out["err-adasum"]
        assert out["err-adasum-optimizer"] == out["err-adasum"]
        assert out["err-process-set"].startswith("TypeError: process_set must be a hvd.ProcessSet")
        assert out["err-unregistered-set"].startswith("HorovodInternalError: allreduce: process set provided does "
                                                      "not exist, or has not been registered")
        assert out["ok-global-set"] == "no error"
        assert out["err-roots"].startswith("MismatchError: Mismatched broadcast")
        assert all(f"rank {k}: float32 [2], root {k % 2}" in out["err-roots"] for k in range(n))
        assert out["err-shapes"].startswith("MismatchError: Mismatched allgather")
        assert all(f"rank {k}: float32 [1, {2 + k}]" in out["err-shapes"] for k in range(n))
        assert out["err-mpi-threads"].startswith("HorovodUnsupportedError")
        assert torch.equal(out["after-errors"], torch.full((2,), float(n)))
        assert out["after-shutdown"] == (False, True)
