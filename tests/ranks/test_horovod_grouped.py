"""reducescatter, the grouped collectives and sparse_allreduce_async on real ranks, against torch.distributed and
against the single collectives: Horovod's row split, Average by default, scale factors, async forms, gradients."""
from __future__ import annotations

import sys

import cloudpickle
import pytest
import torch

import jupyter_torchdist as jt
import jupyter_torchdist.horovod as hvd

from ..support.horovod import RUN

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the rank functions below travel by value


def _reducescatter(out: dict, r: int, n: int) -> None:
    import torch.distributed as dist

    x = torch.arange(7 * 2, dtype=torch.float64).reshape(7, 2) * (r + 1)  # 7 rows: uneven over 2 or 3 ranks
    total = x.clone()
    dist.all_reduce(total)
    rows = [7 // n + (1 if k < 7 % n else 0) for k in range(n)]
    mine = total[sum(rows[:r]):sum(rows[:r + 1])]
    out["rs-average"] = (hvd.reducescatter(x), mine / n)  # Average is the default op
    out["rs-sum-scaled"] = (hvd.reducescatter(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0), mine * 2)
    out["rs-async"] = (hvd.synchronize(hvd.reducescatter_async(x, op=hvd.Sum)), mine)
    ints = torch.arange(7) * (r + 1)
    int_total = ints.clone()
    dist.all_reduce(int_total)
    out["rs-int-average"] = (hvd.reducescatter(ints), torch.div(int_total[sum(rows[:r]):sum(rows[:r + 1])], n,
                                                                rounding_mode="trunc"))
    y = torch.ones(2 * n, 3, requires_grad=True)
    (hvd.reducescatter(y, op=hvd.Sum) * (r + 1)).sum().backward()  # Horovod: allgather(grad) * size for Sum
    out["rs-grad"] = (y.grad, torch.repeat_interleave(torch.arange(1.0, n + 1), 2)[:, None].expand(2 * n, 3) * n)
    try:
        hvd.reducescatter(x, op=hvd.Max)
        out["rs-max"] = "no error"
    except hvd.HorovodInternalError as exc:
        out["rs-max"] = str(exc)


def _grouped(out: dict, r: int, n: int) -> None:
    tensors = [torch.arange(4.0) * (r + 1), torch.full((2, 3), float(r)), torch.arange(3) + r]  # two dtypes
    for op_name, op in (("sum", hvd.Sum), ("average", hvd.Average), ("max", hvd.Max)):
        singles = [hvd.allreduce(t, op=op, prescale_factor=2.0) for t in tensors]
        out[f"grouped-{op_name}"] = (hvd.grouped_allreduce(tensors, op=op, prescale_factor=2.0), singles)
    inplace = [t.clone() for t in tensors]
    hvd.synchronize(hvd.grouped_allreduce_async_(inplace, op=hvd.Sum))
    out["grouped-inplace"] = (inplace, [hvd.allreduce(t, op=hvd.Sum) for t in tensors])
    gathered = [torch.ones(r + 1, 2) * r, torch.arange(r + 2)]
    out["grouped-allgather"] = (hvd.grouped_allgather(gathered), [hvd.allgather(t) for t in gathered])
    scattered = [torch.arange(2.0 * n).reshape(n, 2) * (r + 1), torch.ones(n + 1)]
    out["grouped-reducescatter"] = (hvd.grouped_reducescatter(scattered, op=hvd.Sum),
                                    [hvd.reducescatter(t, op=hvd.Sum) for t in scattered])
    w = [torch.ones(3, requires_grad=True), torch.ones(2, requires_grad=True)]
    sum(s.sum() * (k + 1) for k, s in enumerate(hvd.grouped_allreduce(w, op=hvd.Sum))).backward()
    out["grouped-grad"] = ([p.grad for p in w], [torch.full((3,), float(n)), torch.full((2,), 2.0 * n)])


def _sparse(out: dict, r: int, n: int) -> None:
    dense = torch.zeros(6, 2)
    dense[r] = r + 1.0
    dense[5] = 1.0
    for op_name, op, scale in (("average", hvd.Average, 1.0 / n), ("sum", hvd.Sum, 1.0)):
        result = hvd.sparse_allreduce_async(dense.to_sparse(), name=f"sparse-{op_name}", op=op)()
        out[f"sparse-{op_name}"] = (result.to_dense(), hvd.allreduce(dense, op=hvd.Sum) * scale)
        out[f"sparse-{op_name}-is-sparse"] = result.is_sparse


def grouped_and_scattered() -> dict:
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    out: dict = {}
    _reducescatter(out, r, n)
    _grouped(out, r, n)
    _sparse(out, r, n)
    return out


def _same(got, want) -> bool:
    if isinstance(got, (list, tuple)):
        return len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want))
    return got.dtype == want.dtype and got.shape == want.shape and torch.allclose(got, want)


@pytest.mark.parametrize("n", [2, 3])
def test_reducescatter_grouped_and_sparse(n):
    values = jt.run(grouped_and_scattered, n=n, **RUN)
    for r, out in enumerate(values):
        pairs = {k: v for k, v in out.items() if isinstance(v, tuple)}
        assert len(pairs) == 14
        for key, (got, want) in pairs.items():
            assert _same(got, want), f"rank {r} {key}: {got!r} != {want!r}"
        assert "Reducescatter currently only supports Average and Sum" in out["rs-max"]
        assert out["sparse-average-is-sparse"] and out["sparse-sum-is-sparse"]
