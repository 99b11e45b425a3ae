"""jupyter_torchdist.horovod on real ranks: collectives the ranks call differently raise on every rank (naming each
rank's side) and leave the group usable; ranks waiting on different collectives raise instead of hanging; a name
in flight twice is refused; named collectives issued in different orders are matched, as Horovod matches them."""
from __future__ import annotations

import sys

import cloudpickle
import pytest

import jupyter_torchdist as jt
import jupyter_torchdist.horovod as hvd

from ..support.horovod import RUN

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the rank functions below travel by value


def _outcome(call) -> tuple:
    try:
        call()
    except Exception as exc:  # the test inspects it
        return type(exc).__name__, isinstance(exc, RuntimeError), str(exc)
    return ("no error",)


def _cases(r: int, n: int) -> dict:
    import torch

    other = torch.int32 if r % 2 else torch.float32
    return {
        "allreduce-shape": lambda: hvd.allreduce(torch.ones(3 + r)),
        "allreduce-dtype": lambda: hvd.allreduce(torch.ones(3, dtype=other)),
        "allreduce-op": lambda: hvd.allreduce(torch.ones(3), op=hvd.Max if r % 2 else hvd.Sum),
        "allreduce-scale": lambda: hvd.allreduce(torch.ones(3), prescale_factor=1.0 + r),
        "allreduce-async": lambda: hvd.synchronize(hvd.allreduce_async(torch.ones(2, 1 + r), name="x")),
        "grouped-allreduce": lambda: hvd.grouped_allreduce([torch.ones(2), torch.ones(2 + r)]),
        "allgather-dims": lambda: hvd.allgather(torch.ones(2, 3 + r)),
        "allgather-dtype": lambda: hvd.allgather(torch.ones(2, dtype=other)),
        "broadcast-shape": lambda: hvd.broadcast(torch.ones(2 + r), 0),
        "broadcast-dtype": lambda: hvd.broadcast_(torch.ones(2, dtype=other), 0),
        "broadcast-root": lambda: hvd.broadcast(torch.ones(2), r),
        "alltoall-dims": lambda: hvd.alltoall(torch.ones(n, 2 + r)),
        "reducescatter-shape": lambda: hvd.reducescatter(torch.ones(n * (2 + r))),
    }


def mismatches() -> dict:
    import torch

    hvd.init()
    r, n = hvd.rank(), hvd.size()
    out: dict = {}
    for name, call in _cases(r, n).items():
        out[name] = _outcome(call)
        out[name + " then"] = hvd.allreduce(torch.ones(1), op=hvd.Sum).item()  # the group is still in step
    # ranks waiting on different collectives (Horovod hangs): every rank raises, naming what each waits on
    out["stalled"] = _outcome(lambda: hvd.allreduce(torch.ones(2), name=f"only-on-rank-{r}"))
    out["stalled then"] = hvd.allgather(torch.tensor([r])).tolist()
    return out


def _side(r: int, n: int, name: str) -> str:
    other = "int32" if r % 2 else "float32"
    return {"allreduce-shape": f"rank {r}: float32 [{3 + r}], op Average",
            "allreduce-dtype": f"rank {r}: {other} [3], op Average",
            "allreduce-op": f"rank {r}: float32 [3], op {'Max' if r % 2 else 'Sum'}",
            "allreduce-scale": f"rank {r}: float32 [3], op Average" + (f", prescale {1 + r}, postscale 1" if r
                                                                        else ";"),
            "allreduce-async": f"rank {r}: float32 [2, {1 + r}]",
            "grouped-allreduce": f"rank {r}: float32 [2], float32 [{2 + r}]",
            "allgather-dims": f"rank {r}: float32 [2, {3 + r}]",
            "allgather-dtype": f"rank {r}: {other} [2]",
            "broadcast-shape": f"rank {r}: float32 [{2 + r}], root 0",
            "broadcast-dtype": f"rank {r}: {other} [2], root 0",
            "broadcast-root": f"rank {r}: float32 [2], root {r}",
            "alltoall-dims": f"rank {r}: float32 [{n}, {2 + r}]",
            "reducescatter-shape": f"rank {r}: float32 [{n * (2 + r)}]"}[name]


@pytest.mark.parametrize("n", [2, 3])
def test_mismatched_collectives_raise_on_every_rank_naming_each_side(n):
    values = jt.run(mismatches, n=n, **RUN)
    for out in values:
        for name in _cases(0, n):
            kind, is_runtime_error, message = out[name]
            assert (kind, is_runtime_error) == ("MismatchError", True), (name, out[name])
            assert all(_side(r, n, name) in message for r in range(n)), (name, message)
            assert "still usable" in message and out[name + " then"] == n
        kind, _, message = out["stalled"]
        assert kind == "StalledError" and "Horovod would hang" in message
        assert all(f"rank {r}: allreduce 'only-on-rank-{r}' of float32 [2]" in message for r in range(n)), message
        assert out["stalled then"] == list(range(n))


def names() -> dict:
    import torch

    hvd.init()
    r = hvd.rank()
    out: dict = {}
    # Horovod's duplicate-name test: the first one waits (the other rank is in barrier), the second is refused
    for turn in (0, 1):
        if r == turn:
            first = hvd.allreduce_async(torch.ones(3), name="dup", op=hvd.Sum)
            out[f"dup-{turn}"] = _outcome(lambda: hvd.allreduce_async(torch.ones(3), name="dup"))
            out[f"first-{turn}"] = first
        hvd.barrier()
    out["first"] = hvd.synchronize(out.pop(f"first-{r}")).tolist()  # matched once every rank issued it
    out["reused"] = hvd.allreduce(torch.ones(1), name="dup", op=hvd.Sum).item()  # done: the name is free again
    # named collectives issued in a different order on each rank are matched by name, as in Horovod
    a, b = torch.full((2,), r + 1.0), torch.full((3,), 10.0 * (r + 1))
    order = [("a", a), ("b", b)] if r == 0 else [("b", b), ("a", a)]
    handles = {name: hvd.allreduce_async(t, name=name, op=hvd.Sum) for name, t in order}
    gather = hvd.allgather_async(torch.tensor([r]), name="g") if r else None
    out["a"], out["b"] = hvd.synchronize(handles["a"]).tolist(), hvd.synchronize(handles["b"]).tolist()
    out["g"] = hvd.synchronize(gather or hvd.allgather_async(torch.tensor([r]), name="g")).tolist()
    return out


def test_names_in_flight_are_refused_and_names_match_across_orders():
    values = jt.run(names, n=2, **RUN)
    for r, out in enumerate(values):
        kind, _, message = out[f"dup-{r}"]
        assert kind == "ValueError" and "allreduce 'dup' is already in progress on this rank" in message
        assert out["first"] == [2.0] * 3 and out["reused"] == 2.0
        assert out["a"] == [3.0] * 2 and out["b"] == [30.0] * 3 and out["g"] == [0, 1]


def joined() -> dict:
    import torch

    hvd.init()
    r = hvd.rank()
    out: dict = {}
    if r == 0:
        out["last"] = hvd.join()
    else:  # the active ranks disagree while rank 0 is inside join()
        out["roots"] = _outcome(lambda: hvd.broadcast(torch.ones(2), r))
        out["shapes"] = _outcome(lambda: hvd.allreduce(torch.ones(2 + r)))
        out["allgather"] = _outcome(lambda: hvd.allgather(torch.ones(2)))
        out["sum"] = hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist()  # rank 0 contributes zeros
        out["last"] = hvd.join()
    return out


def test_mismatches_while_a_rank_has_joined():
    values = jt.run(joined, n=3, **RUN)
    assert [v["last"] for v in values] == [2, 2, 2]
    for out in values[1:]:
        assert out["roots"][0] == "MismatchError" and "rank 0: (inside hvd.join()" in out["roots"][2]
        assert "rank 1: float32 [2], root 1" in out["roots"][2] and "rank 2: float32 [2], root 2" in out["roots"][2]
        assert out["shapes"][0] == "MismatchError"
        assert out["allgather"][:2] == ("JoinedRankError", True) and "hvd.join()" in out["allgather"][2]
        assert out["sum"] == [2.0, 2.0]
