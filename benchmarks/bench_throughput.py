"""Issue #3, item 3: steady-state training throughput under our launcher vs torchrun.

    python benchmarks/bench_throughput.py [--rounds 3] [--models mlp,cnn] [--seconds 3]

The same DDP loop (jobs.throughput: a small MLP on random vectors, a small CNN on synthetic 32x32
images; gloo, 2 ranks) runs under ``jupyter_torchdist.run(..., n=2, all_ranks=True)`` and under
``torchrun --nproc_per_node 2``. Each rank times only steps ``warmup``..``steps`` (after a barrier)
and returns its steps/s; the value per run is the mean over ranks (DDP keeps them in lock step).
Runs alternate ours/torchrun (the order flips each round); the ratio is median(ours)/median(torchrun).

Threads, made equal: our ranks call ``torch.set_num_threads(cores // ranks_per_host)``; torchrun
sets ``OMP_NUM_THREADS=1`` for nproc > 1. On this 2-core machine with 2 ranks both give 1 intra-op
thread per rank (each rank reports ``torch.get_num_threads()``, shown in the table), so the
defaults are already the fair setting: one core per rank, nothing oversubscribed. On a machine
where cores // ranks > 1 the defaults would differ; ``--threads T`` forces T in both (the job
calls ``torch.set_num_threads(T)`` itself). torchrun also gets ``GLOO_SOCKET_IFNAME=lo``, which our
ranks set on a local master, so both use the same gloo transport.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common

jobs = common.register_jobs()
WARMUP_STEPS = 20


def parse_args() -> argparse.Namespace:
    ap = common.parser(__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--seconds", type=float, default=3.0, help="steady-state length to aim for, per run")
    ap.add_argument("--threads", type=int, default=None, help="force torch threads per rank in both launchers")
    return ap.parse_args()


def ours(kind: str, steps: int, threads: int | None) -> list[dict[str, Any]]:
    import jupyter_torchdist as jtd

    return jtd.run(jobs.throughput, kind, steps, WARMUP_STEPS, threads, n=2, all_ranks=True)


def theirs(kind: str, steps: int, threads: int | None) -> list[dict[str, Any]]:
    kw = {"kind": kind, "steps": steps, "warmup": WARMUP_STEPS, "threads": threads}
    return common.run_torchrun("throughput", kw, nproc=2, env=common.LOOPBACK_ENV)[1]


def steps_per_run(kind: str, args: argparse.Namespace) -> int:
    """Steps for about ``--seconds`` of steady state, from a short probe run of ours."""
    probe = ours(kind, WARMUP_STEPS + 30, args.threads)
    rate = sum(v["steps_per_s"] for v in probe) / len(probe)
    steps = WARMUP_STEPS + max(50, int(rate * args.seconds))
    print(f"{kind}: ~{rate:.0f} steps/s in a short probe run -> {steps} steps per run", flush=True)
    return steps


def measure_model(kind: str, args: argparse.Namespace) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Ours and torchrun alternating for ``--rounds`` rounds: (steps/s per run, the steps and threads seen)."""
    steps = steps_per_run(kind, args)
    res: dict[str, list[float]] = {"ours": [], "torchrun": []}
    seen: dict[str, Any] = {}
    for r in range(args.rounds):
        order = [("ours", ours), ("torchrun", theirs)]
        if r % 2:
            order.reverse()
        for name, fn in order:
            time.sleep(0.5)
            values = fn(kind, steps, args.threads)
            res[name].append(sum(v["steps_per_s"] for v in values) / len(values))
            seen[name] = {"threads": sorted({v["threads"] for v in values}),
                          "OMP_NUM_THREADS": sorted({str(v["omp_env"]) for v in values})}
        print(f"  round {r}: ours {res['ours'][-1]:.1f} steps/s, torchrun {res['torchrun'][-1]:.1f} steps/s",
              flush=True)
    return res, {"steps": steps, "threads": seen}


def print_table(results: dict[str, dict[str, list[float]]], meta: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The table per model; returns the ``key=value`` summary (ratio, steps/s of each)."""
    rows, kv = [], {}
    for kind, res in results.items():
        o, t = common.median(res["ours"]), common.median(res["torchrun"])
        spread = max(res["torchrun"]) / min(res["torchrun"]) - 1 if res["torchrun"] else float("nan")
        th = meta[kind]["threads"]
        rows.append([kind, meta[kind]["steps"], f"{o:.1f}", f"{t:.1f}", f"{o / t:.3f}",
                     " ".join(f"{x:.1f}" for x in res["ours"]), " ".join(f"{x:.1f}" for x in res["torchrun"]),
                     f"{100 * spread:.1f}%",
                     f"ours {th['ours']['threads']} (OMP {th['ours']['OMP_NUM_THREADS']}); "
                     f"torchrun {th['torchrun']['threads']} (OMP {th['torchrun']['OMP_NUM_THREADS']})"])
        kv[f"{kind}_ratio"] = o / t
        kv[f"{kind}_ours_steps_s"] = o
        kv[f"{kind}_torchrun_steps_s"] = t
    print()
    print(common.table(["model", "steps/run", "ours steps/s", "torchrun steps/s", "ours / torchrun", "ours runs",
                        "torchrun runs", "torchrun spread", "torch threads per rank"], rows))
    return kv


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    info = common.begin("bench_throughput: steady-state DDP steps/s, ours vs torchrun (2 ranks, gloo)")
    print(f"warm-up {common.warm_up():.2f} s", flush=True)
    results: dict[str, dict[str, list[float]]] = {}
    meta: dict[str, dict[str, Any]] = {}
    for kind in args.models.split(","):
        results[kind], meta[kind] = measure_model(kind, args)
    kv = print_table(results, meta)
    print()
    for kind in results:
        r = kv[f"{kind}_ratio"]
        print(f"target {kind}_ratio >= 0.97: {r:.3f} {'MET' if r >= 0.97 else 'MISSED'}")
    common.finish("bench_throughput", {"machine": info, "results": results, "meta": meta, "kv": kv,
                                       "total_s": None,  # finish fills it in, in this place
                                       "threads_forced": args.threads}, started, kv)


if __name__ == "__main__":
    main()
