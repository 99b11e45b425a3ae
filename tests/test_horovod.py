"""jupyter_torchdist.horovod on real ranks: every call against its torch.distributed equivalent, DistributedOptimizer
against DDP, join with uneven data, the unsupported names, and init outside our launcher."""
from __future__ import annotations

import os
import socket
import sys

import cloudpickle
import pytest
import torch

import jupyter_torchdist as jt
import jupyter_torchdist.horovod as hvd

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the rank functions below travel by value

RUN = {"local": True, "all_ranks": True, "timeout": 120}


# ---------------------------------------------------------------------------------------------------- collectives

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
        assert "torch.distributed.new_group(ranks)" in out["err-process-set"]
        assert out["ok-global-set"] == "no error"
        assert out["err-roots"].startswith("ValueError: Mismatched broadcast root ranks")
        assert out["err-shapes"].startswith("ValueError: Mismatched tensor shapes")
        assert out["err-mpi-threads"].startswith("HorovodUnsupportedError")
        assert torch.equal(out["after-errors"], torch.full((2,), float(n)))
        assert out["after-shutdown"] == (False, True)


# ------------------------------------------------------------------------------------------ DistributedOptimizer

class _Net(torch.nn.Module):
    def __init__(self, extra: bool) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        self.extra = torch.nn.Linear(6, 1) if extra else None  # used on rank 0 only: None grads elsewhere

    def forward(self, x: torch.Tensor, use_extra: bool) -> torch.Tensor:
        y = self.body(x)
        return y + self.extra(x) if use_extra and self.extra is not None else y


def _net(extra: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)  # the same start on every rank, as after a broadcast
    return _Net(extra)


def _loss(net: torch.nn.Module, rank: int, step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * rank + step)
    x = torch.randn(8, 6, generator=g)
    return ((net(x, use_extra=rank == 0) - x.sum(1, keepdim=True)) ** 2).mean()


def _optimizer(kind: str, params) -> torch.optim.Optimizer:
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    return torch.optim.Adam(params, lr=0.01)


def _ddp(kind: str, steps: int, passes: int = 1, clip: float = 0.0, extra: bool = False) -> list[torch.Tensor]:
    import contextlib

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(_net(extra), find_unused_parameters=extra)
    opt = _optimizer(kind, model.parameters())
    for step in range(steps):
        for k in range(passes):
            with model.no_sync() if k < passes - 1 else contextlib.nullcontext():
                _loss(model, dist.get_rank(), step * passes + k).backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad()
    return [p.detach().clone() for p in model.module.parameters()]


def _hvd(kind: str, steps: int, passes: int = 1, clip: float = 0.0, extra: bool = False, add_later: bool = False,
         **options) -> list:
    model = _net(extra)
    params = list(model.parameters())
    opt = hvd.DistributedOptimizer(_optimizer(kind, params[:2] if add_later else params),
                                   named_parameters=model.named_parameters(), backward_passes_per_step=passes,
                                   **options)
    if add_later:  # the new parameters get averaged too
        opt.add_param_group({"params": params[2:]})
    for step in range(steps):
        for k in range(passes):
            _loss(model, hvd.rank(), step * passes + k).backward()
        if clip:
            opt.synchronize()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            with opt.skip_synchronize():
                opt.step()
        else:
            opt.step()
        opt.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


def _wire_dtypes(fn, *args, **kwargs) -> tuple:
    """Run fn while recording the dtype of every floating tensor handed to dist.all_reduce (what travels)."""
    import torch.distributed as dist

    seen: set = set()
    original = dist.all_reduce

    def spy(tensor, *a, **kw):
        if tensor.is_floating_point():
            seen.add(tensor.dtype)
        return original(tensor, *a, **kw)

    dist.all_reduce = spy
    try:
        return fn(*args, **kwargs), seen
    finally:
        dist.all_reduce = original


def _optimizer_checks() -> dict:
    model = _net()
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters()), backward_passes_per_step=2)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)  # schedulers accept it: it is an Adam
    out: dict = {"class": (type(opt).__name__, isinstance(opt, torch.optim.Adam))}
    _loss(model, hvd.rank(), 0).backward()
    try:
        opt.zero_grad()
        out["zero_grad-mid-accumulation"] = "no error"
    except AssertionError as exc:
        out["zero_grad-mid-accumulation"] = str(exc)
    _loss(model, hvd.rank(), 1).backward()
    out["launched-in-backward"] = opt._hvd_reducer._next == len(opt._hvd_reducer.buckets)  # before step()
    opt.step()
    sched.step()
    state = opt.state_dict()
    opt.zero_grad()
    opt.load_state_dict(state)
    out["lr-after-scheduler"] = opt.param_groups[0]["lr"]
    big = torch.nn.Linear(600, 600)  # 1.4 MB: over the 1 MB first bucket
    out["buckets"] = [len(hvd.DistributedOptimizer(torch.optim.SGD(m.parameters()), groups=g)._hvd_reducer.buckets)
                      for m, g in ((_net(), None), (_net(), 2), (_net(), 3), (big, None))]
    return out


def optimizer_vs_ddp() -> dict:
    hvd.init()
    steps = 4
    out: dict = {}
    for kind in ("sgd", "adam"):
        out[kind] = (_hvd(kind, steps), _ddp(kind, steps))
    out["adam-groups"] = (_hvd("adam", steps, groups=2), out["adam"][1])
    out["sgd-unused-param"] = (_hvd("sgd", steps, extra=True), _ddp("sgd", steps, extra=True))
    out["sgd-2-passes"] = (_hvd("sgd", steps, passes=2), _ddp("sgd", steps, passes=2))
    out["sgd-predivide"] = (_hvd("sgd", steps, gradient_predivide_factor=2.0), out["sgd"][1])
    out["sgd-clip"] = (_hvd("sgd", steps, clip=0.5), _ddp("sgd", steps, clip=0.5))
    fp16, out["fp16-wire"] = _wire_dtypes(_hvd, "sgd", steps, compression=hvd.Compression.fp16)
    out["fp16"] = (fp16, out["sgd"][1])
    out["plain-wire"] = _wire_dtypes(_hvd, "sgd", 1)[1]
    out["sgd-added-group"] = (_hvd("sgd", steps, add_later=True), out["sgd"][1])
    out.update(_optimizer_checks())
    out.update(_without_join_protocol(steps, out["sgd"][1]))
    return out


def _without_join_protocol(steps: int, ddp: list) -> dict:
    """JUPYTER_TORCHDIST_HOROVOD_JOIN=0: the same results, only the data on the wire (DDP's traffic), no join()."""
    import torch.distributed as dist

    hvd.shutdown()
    os.environ["JUPYTER_TORCHDIST_HOROVOD_JOIN"] = "0"
    hvd.init()  # adopts the launcher's group again, reading the variable
    calls: list = []
    original = dist.all_reduce
    dist.all_reduce = lambda tensor, *a, **kw: calls.append(tensor.dtype) or original(tensor, *a, **kw)
    try:
        ours = _hvd("sgd", steps)
    finally:
        dist.all_reduce = original
    try:
        hvd.join()
        refused = "no error"
    except RuntimeError as exc:
        refused = str(exc)
    return {"no-join-protocol": (ours, ddp), "no-join-calls": calls, "no-join-refused": refused}


def test_distributed_optimizer_equals_ddp():
    values = jt.run(optimizer_vs_ddp, n=2, **RUN)
    for r, out in enumerate(values):
        for key in ("sgd", "adam", "adam-groups", "sgd-unused-param", "sgd-2-passes", "sgd-predivide", "sgd-clip",
                    "sgd-added-group", "no-join-protocol"):
            ours, ddp = out[key]
            assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(ours, ddp)), f"rank {r} {key}"
        ours, ddp = out["fp16"]
        assert all(torch.allclose(a, b, rtol=1e-2, atol=1e-2) for a, b in zip(ours, ddp))
        assert any(not torch.equal(a, b) for a, b in zip(ours, ddp))  # it really went through float16
        assert out["fp16-wire"] == {torch.float16} and out["plain-wire"] == {torch.float32}
        assert out["class"] == ("Adam", True)
        assert out["zero_grad-mid-accumulation"].startswith("optimizer.zero_grad() was called after loss.backward()")
        assert out["lr-after-scheduler"] == pytest.approx(0.0001)
        assert out["launched-in-backward"] and out["buckets"] == [1, 2, 3, 2]
        assert out["no-join-calls"] == [torch.float32] * 4  # one allreduce per step, no control messages
        assert "JUPYTER_TORCHDIST_HOROVOD_JOIN=0" in out["no-join-refused"]
    for key in ("sgd", "adam"):
        assert all(torch.equal(a, b) for a, b in zip(values[0][key][0], values[1][key][0]))  # ranks agree


# -------------------------------------------------------------------------------------------- broadcast state

def _state_equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_state_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_state_equal(x, y) for x, y in zip(a, b))
    return a == b


def broadcast_state() -> dict:
    import copy

    hvd.init()
    r = hvd.rank()
    torch.manual_seed(r)  # every rank starts different
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    model(torch.randn(5, 4))  # BatchNorm buffers differ too (running stats, num_batches_tracked)
    out: dict = {"before": copy.deepcopy(model.state_dict())}
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    out["model"] = copy.deepcopy(model.state_dict())
    head = torch.nn.Linear(3, 2)
    hvd.broadcast_parameters(head.named_parameters(), root_rank=1)  # a generator of (name, tensor) pairs
    out["head"] = copy.deepcopy(head.state_dict())
    for kind in ("sgd", "adam"):
        opt = _optimizer(kind, model.parameters())
        if r == 0:  # only the root has state (and a changed learning rate); the others are fresh
            opt.param_groups[0]["lr"] = 0.123
            for _ in range(2):
                model(torch.randn(5, 4)).sum().backward()
                opt.step()
                opt.zero_grad()
        wrapped = hvd.DistributedOptimizer(opt) if kind == "adam" else opt
        out[f"{kind}-fresh"] = len(opt.state) == 0
        hvd.broadcast_optimizer_state(wrapped, root_rank=0)
        out[kind] = copy.deepcopy(wrapped.state_dict())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    model(torch.randn(5, 4) * (r + 1)).sum().backward()  # one distributed step from the common state
    wrapped.step()
    out["after-step"] = [p.detach().clone() for p in model.parameters()]  # (BatchNorm statistics stay local)
    return out


def test_broadcast_parameters_and_optimizer_state():
    values = jt.run(broadcast_state, n=3, **RUN)
    root = values[0]
    assert not _state_equal(values[1]["before"], root["before"])  # the ranks really started apart
    assert [v["sgd-fresh"] for v in values] == [False, True, True] == [v["adam-fresh"] for v in values]
    assert root["sgd"]["state"] and root["sgd"]["param_groups"][0]["lr"] == 0.123
    assert set(root["adam"]["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
    for v in values:
        for key in ("model", "sgd", "adam", "after-step"):
            assert _state_equal(v[key], root[key]), key
        assert _state_equal(v["head"], values[1]["head"])  # rank 1 was the root for this one


# ------------------------------------------------------------------------------------------------------- join

def _simulate(batches: list[int]) -> list[list[torch.Tensor]]:
    """Horovod's join semantics computed in one process: a joined rank adds zeros, the average divides by size."""
    model = _net()
    opt = _optimizer("sgd", model.parameters())
    snapshots: dict[int, list[torch.Tensor]] = {}
    for step in range(max(batches)):
        grads = [torch.zeros_like(p) for p in model.parameters()]
        for rank, count in enumerate(batches):
            if step < count:
                model.zero_grad()
                _loss(model, rank, step).backward()
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
    model = _net()
    opt = hvd.DistributedOptimizer(_optimizer("sgd", model.parameters()), named_parameters=model.named_parameters(),
                                   groups=groups)
    out: dict = {"buckets": len(opt._hvd_reducer.buckets)}
    for step in range(batches[r]):
        loss = _loss(model, r, step)
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


# ------------------------------------------------------------------------- no group: refusals, init from the env

def test_before_init_every_call_says_to_init():
    assert not hvd.is_initialized()
    for call in (hvd.size, hvd.rank, hvd.local_rank, hvd.cross_size, hvd.barrier, lambda: hvd.join(),
                 lambda: hvd.allreduce(torch.ones(1)), lambda: hvd.allgather(torch.ones(1)),
                 lambda: hvd.broadcast_parameters({}, 0), lambda: hvd.broadcast_object(1),
                 lambda: hvd.DistributedOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))]))):
        with pytest.raises(ValueError, match=r"Horovod has not been initialized; use hvd.init\(\)"):
            call()


def test_init_without_a_launcher_says_how_to_launch(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(hvd.HorovodLaunchError) as info:
        hvd.init()
    message = str(info.value)
    assert "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT not set" in message
    assert "%%distribute" in message and "python -m jupyter_torchdist -n N" in message and "torchrun" in message
    assert not hvd.is_initialized()


@pytest.mark.parametrize("name, advice", [
    ("elastic", "torchrun --nnodes MIN:MAX"), ("add_process_set", "torch.distributed.new_group(ranks)"),
    ("ProcessSet", "torch.distributed.new_group(ranks)"), ("remove_process_set", "new_group"),
    ("SyncBatchNorm", "torch.nn.SyncBatchNorm"), ("start_timeline", "torch.profiler"),
    ("reducescatter", "reduce_scatter_tensor"), ("grouped_allreduce", "hvd.allreduce"),
    ("no_such_thing", "Supported: Adasum, Average"),
])
def test_unsupported_names_fail_at_once_with_the_torch_way(name, advice):
    with pytest.raises(hvd.HorovodUnsupportedError) as info:
        getattr(hvd, name)
    assert isinstance(info.value, NotImplementedError) and advice in str(info.value)
    assert not hasattr(hvd, name)  # also an AttributeError: hasattr and getattr(..., default) behave


def test_elastic_import_and_build_queries():
    with pytest.raises(hvd.HorovodUnsupportedError, match="torchrun --nnodes MIN:MAX"):
        from jupyter_torchdist.horovod import elastic  # noqa: F401
    with pytest.raises(hvd.HorovodUnsupportedError, match="torch.distributed.elastic"):
        import jupyter_torchdist.horovod.elastic  # noqa: F401
    assert hvd.Adasum == 2 and hvd.Average == 0  # the names exist (Horovod code picks ops at import time)
    with pytest.raises(hvd.HorovodUnsupportedError, match="MPI is not used"):
        hvd.mpi_threads_supported()
    with pytest.raises(hvd.HorovodUnsupportedError, match="process sets"):
        hvd.init(process_sets=[[0, 1]])
    assert (hvd.mpi_built(), hvd.mpi_enabled(), hvd.ddl_built(), hvd.ccl_built()) == (False,) * 4
    assert hvd.gloo_built() is True and hvd.gloo_enabled() is False  # no group in this process
    assert hvd.nccl_built() == torch.distributed.is_nccl_available()
    assert hvd.cuda_built() == (torch.version.cuda is not None) and hvd.rocm_built() == (torch.version.hip is not None)


def _torchrun_style(index: int, port: int, queue) -> None:
    """A plain spawned process: only the four torchrun variables, no launcher, no process group."""
    import torch.distributed as dist

    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE"):
        os.environ.pop(name, None)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(index), WORLD_SIZE="2")
    hvd.init()
    out = {"rank": hvd.rank(), "size": hvd.size(), "layout": (hvd.local_rank(), hvd.local_size(), hvd.cross_rank(),
                                                               hvd.cross_size()),
           "backend": dist.get_backend(), "sum": hvd.allreduce(torch.tensor([index + 1.0]), op=hvd.Sum).item(),
           "gloo": hvd.gloo_enabled()}
    hvd.shutdown()  # the group is ours here: destroyed
    out["after"] = (hvd.is_initialized(), dist.is_initialized())
    queue.put(out)


def test_init_from_torchrun_style_environment():
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_torchrun_style, args=(port, queue), nprocs=2, join=True)
    results = sorted((queue.get() for _ in range(2)), key=lambda out: out["rank"])
    for r, out in enumerate(results):
        assert out["size"] == 2 and out["backend"] == "gloo" and out["sum"] == 3.0 and out["gloo"]
        assert out["layout"] == (r, 2, 0, 1)  # counted from host names: one host, two ranks
        assert out["after"] == (False, False)
