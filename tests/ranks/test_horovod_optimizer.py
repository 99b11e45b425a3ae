"""hvd.DistributedOptimizer on real ranks against DDP (SGD, Adam, groups, unused parameters, accumulation,
predivide, clipping, fp16, added groups, no join protocol), and broadcast_parameters / broadcast_optimizer_state."""
from __future__ import annotations

import os
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


def _ddp(kind: str, steps: int, passes: int = 1, clip: float = 0.0, extra: bool = False) -> list[torch.Tensor]:
    import contextlib

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(make_net(extra), find_unused_parameters=extra)
    opt = make_optimizer(kind, model.parameters())
    for step in range(steps):
        for k in range(passes):
            with model.no_sync() if k < passes - 1 else contextlib.nullcontext():
                batch_loss(model, dist.get_rank(), step * passes + k).backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad()
    return [p.detach().clone() for p in model.module.parameters()]


def _hvd(kind: str, steps: int, passes: int = 1, clip: float = 0.0, extra: bool = False, add_later: bool = False,
         **options) -> list:
    model = make_net(extra)
    params = list(model.parameters())
    opt = hvd.DistributedOptimizer(make_optimizer(kind, params[:2] if add_later else params),
                                   named_parameters=model.named_parameters(), backward_passes_per_step=passes,
                                   **options)
    if add_later:  # the new parameters get averaged too
        opt.add_param_group({"params": params[2:]})
    for step in range(steps):
        for k in range(passes):
            batch_loss(model, hvd.rank(), step * passes + k).backward()
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
    model = make_net()
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters()), backward_passes_per_step=2)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)  # schedulers accept it: it is an Adam
    out: dict = {"class": (type(opt).__name__, isinstance(opt, torch.optim.Adam))}
    batch_loss(model, hvd.rank(), 0).backward()
    try:
        opt.zero_grad()
        out["zero_grad-mid-accumulation"] = "no error"
    except AssertionError as exc:
        out["zero_grad-mid-accumulation"] = str(exc)
    batch_loss(model, hvd.rank(), 1).backward()
    reducer = opt._hvd_reducer  # before step(): this layout was agreed by the steps above, so no round waits
    out["launched-in-backward"] = reducer._launched == len(reducer.buckets) and reducer._round is None
    opt.step()
    sched.step()
    state = opt.state_dict()
    opt.zero_grad()
    opt.load_state_dict(state)
    out["lr-after-scheduler"] = opt.param_groups[0]["lr"]
    big = torch.nn.Linear(600, 600)  # 1.4 MB: over the 1 MB first bucket
    out["buckets"] = [len(hvd.DistributedOptimizer(torch.optim.SGD(m.parameters()), groups=g)._hvd_reducer.buckets)
                      for m, g in ((make_net(), None), (make_net(), 2), (make_net(), 3), (big, None))]
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
    out["control-rounds"] = _control_rounds_per_step(steps)
    out.update(_without_join_protocol(steps, out["sgd"][1]))
    return out


def _control_rounds_per_step(steps: int) -> list:
    """Control rounds (the negotiation's all_gathers) in each step of a fresh layout: the first step is agreed,
    the later ones send their buckets with none (DDP's traffic)."""
    from jupyter_torchdist.horovod import negotiation

    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Linear(7, 2))  # a layout no other test uses
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    original, counts = negotiation.all_gather_single, []

    def counted(*args, **kwargs):
        counts[-1] += 1
        return original(*args, **kwargs)

    negotiation.all_gather_single = counted
    try:
        for step in range(steps):
            counts.append(0)
            model(torch.full((3, 5), float(step + hvd.rank()))).sum().backward()
            opt.step()
            opt.zero_grad()
    finally:
        negotiation.all_gather_single = original
    return counts


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
        assert out["control-rounds"] == [1, 0, 0, 0]  # only the layout's first step is negotiated
    for key in ("sgd", "adam"):
        assert all(torch.equal(a, b) for a, b in zip(values[0][key][0], values[1][key][0]))  # ranks agree


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
        opt = make_optimizer(kind, model.parameters())
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
