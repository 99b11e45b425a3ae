"""What a detached run costs against a background run, side by side in one run.

    python benchmarks/bench_detach.py [--rounds 4]

One process holds what a notebook's kernel holds (the extension's process server warm, after one untimed run of
each kind). Each round, alternating which goes first, runs the same two-rank ``--local`` cell (an all-reduce) as a
background run (``run(..., background=True).result()``) and as a detached run (``run(..., detach=True)
.result()``: a runner process of its own starts, with its own process server), and then collects the ended detached
run from its id as a later kernel would (``attach(ID).result()``). Measured: seconds from the call to the value.

Targets (set before measuring): a detached run's value at most 5 s after a background run's would come (the runner's
start is the price of outliving the kernel), and an ended run collected by id in at most 0.5 s.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common


def cell() -> float:
    import torch
    import torch.distributed as dist

    t = torch.ones(1)
    dist.all_reduce(t)
    return float(t.item())


def main() -> None:
    ap = common.parser(__doc__)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    os.environ["JUPYTER_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="bench-detach-")   # its runs only
    import jupyter_torchdist as jt
    from jupyter_torchdist.launchers.local_server import get_zygote

    started = time.perf_counter()
    info = common.begin("bench_detach: a detached run against a background run, and collecting one by id")
    get_zygote().ready.wait(60)
    jt.run(cell, n=2, local=True, background=True).result(120)   # untimed: what a first cell pays
    jt.run(cell, n=2, local=True, detach=True).result(120)
    times: dict[str, list[float]] = {"background": [], "detached": [], "collect": []}
    for r in range(args.rounds):
        for side in common.rotated(["background", "detached"], r):
            t0 = time.perf_counter()
            handle: Any = jt.run(cell, n=2, local=True, background=side == "background", detach=side == "detached")
            assert handle.result(120) == 2.0
            times[side].append(time.perf_counter() - t0)
            if side == "detached":
                t0 = time.perf_counter()
                assert jt.attach(handle.id).result(30) == 2.0
                times["collect"].append(time.perf_counter() - t0)
        print(f"round {r}: " + common.kv_line({k: v[-1] for k, v in times.items()}), flush=True)
    medians = {k: common.median(v) for k, v in times.items()}
    extra = medians["detached"] - medians["background"]
    print(common.table(["median", "seconds"], [[k, common.fmt_s(v)] for k, v in medians.items()]
                       + [["detached - background", common.fmt_s(extra)]]))
    values = {"detach_extra_s": extra, "collect_s": medians["collect"]}
    common.check_targets(values, [("detach_extra_s", 5.0, False), ("collect_s", 0.5, False)])
    common.finish("bench_detach", {"machine": info, "rounds": times, "medians": medians, **values}, started,
                  {**{f"{k}_s": v for k, v in medians.items()}, **values})


if __name__ == "__main__":
    main()
