"""Every dtype Horovod supports on CPU through every collective, on real ranks, exactly: uint8, int8, int16 (which
gloo lacks: carried as int32 or as a float16 view), int32, int64, float16, bfloat16, float32, float64, bool."""
from __future__ import annotations

import sys

import cloudpickle
import torch

import jupyter_torchdist as jt
import jupyter_torchdist.horovod as hvd

from ..support.horovod import RUN

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the rank functions below travel by value

DTYPES = ["uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool"]


def values(rank: int, dtype: torch.dtype, rows: int = 4) -> torch.Tensor:
    """Rank ``rank``'s input: large enough that integer sums and products wrap around in the narrow types."""
    if dtype == torch.bool:
        return torch.tensor([(rank + i) % 2 == 0 for i in range(rows * 2)]).reshape(rows, 2)
    base = {torch.uint8: 100, torch.int8: 60, torch.int16: 30000}.get(dtype, 3)
    sign = -1 if dtype in (torch.int32, torch.int64) and rank % 2 else 1
    return (torch.arange(rows * 2).reshape(rows, 2) + base * sign + rank).to(dtype)


def expected(op: str, inputs: list[torch.Tensor]) -> torch.Tensor:
    """What the reduction is in the dtype's own arithmetic (wrap-around included), computed on one process."""
    dtype = inputs[0].dtype
    if dtype == torch.bool:
        stacked = torch.stack(inputs)
        return stacked.any(0) if op in ("sum", "max") else stacked.all(0)
    wide = torch.stack([t.to(torch.float64 if dtype.is_floating_point else torch.int64) for t in inputs])
    result = {"sum": wide.sum(0), "min": wide.min(0).values, "max": wide.max(0).values, "product": wide.prod(0)}[op]
    return result.to(dtype)


def every_dtype() -> dict:
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    ops = {"sum": hvd.Sum, "min": hvd.Min, "max": hvd.Max, "product": hvd.Product}
    out: dict = {}
    for name in DTYPES:
        dtype = getattr(torch, name)
        mine = values(r, dtype)
        for op_name, op in ops.items():
            out[name, "allreduce", op_name] = hvd.allreduce(mine, op=op)
        out[name, "allgather"] = hvd.allgather(mine[:r + 1])  # first dimensions differ
        out[name, "broadcast"] = hvd.broadcast(mine, n - 1)
        inplace = mine.clone()
        hvd.broadcast_(inplace, 0)
        out[name, "broadcast_"] = inplace
        out[name, "alltoall"] = hvd.alltoall(torch.cat([mine[:1]] * n))
        if dtype != torch.bool:
            out[name, "reducescatter"] = hvd.reducescatter(mine, op=hvd.Sum)  # 4 rows over n ranks
        out[name, "grouped_allgather"] = hvd.grouped_allgather([mine, mine[:1]])
    grouped = [values(r, getattr(torch, name)) for name in DTYPES if name != "bool"]  # one call, every dtype
    out["grouped_allreduce"] = hvd.grouped_allreduce(grouped, op=hvd.Sum)
    out["grouped_reducescatter"] = hvd.grouped_reducescatter(grouped, op=hvd.Sum)
    return out


def _rows(n: int, rank: int, total: int = 4) -> slice:
    sizes = [total // n + (1 if r < total % n else 0) for r in range(n)]
    return slice(sum(sizes[:rank]), sum(sizes[:rank + 1]))


def _same(got: torch.Tensor, want: torch.Tensor) -> bool:
    return got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)


def test_every_dtype_through_every_collective_exactly():
    n = 3
    results = jt.run(every_dtype, n=n, **RUN)
    for r, out in enumerate(results):
        for name in DTYPES:
            dtype = getattr(torch, name)
            inputs = [values(k, dtype) for k in range(n)]
            for op in ("sum", "min", "max", "product"):
                assert _same(out[name, "allreduce", op], expected(op, inputs)), (name, op)
            assert _same(out[name, "allgather"], torch.cat([inputs[k][:k + 1] for k in range(n)])), name
            assert _same(out[name, "broadcast"], inputs[n - 1]) and _same(out[name, "broadcast_"], inputs[0])
            assert _same(out[name, "alltoall"], torch.cat([inputs[k][:1] for k in range(n)])), name
            if dtype != torch.bool:
                assert _same(out[name, "reducescatter"], expected("sum", inputs)[_rows(n, r)]), name
            first, second = out[name, "grouped_allgather"]
            assert _same(first, torch.cat(inputs)) and _same(second, torch.cat([t[:1] for t in inputs])), name
        names = [name for name in DTYPES if name != "bool"]
        for name, got in zip(names, out["grouped_allreduce"]):
            assert _same(got, expected("sum", [values(k, getattr(torch, name)) for k in range(n)])), name
        for name, got in zip(names, out["grouped_reducescatter"]):
            want = expected("sum", [values(k, getattr(torch, name)) for k in range(n)])[_rows(n, r)]
            assert _same(got, want), name
    int16_sum = expected("sum", [values(k, torch.int16) for k in range(n)])
    assert int(int16_sum[0, 0]) == 30000 + 30001 + 30002 - 2 ** 16  # the sums checked above wrapped around
