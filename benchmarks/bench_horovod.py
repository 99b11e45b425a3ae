"""Issue #13, item 5: steady-state steps/s of jupyter_torchdist.horovod's DistributedOptimizer against DDP.

    python benchmarks/bench_horovod.py [--rounds 5] [--models mlp,cnn] [--seconds 2]

The same training loop as bench_throughput (jobs._model: a small MLP on random vectors, a small CNN on synthetic
32x32 images; SGD, gloo, 2 ranks) with the gradients averaged three ways, side by side in the same rank processes
of one run (``jupyter_torchdist.run(..., n=2, all_ranks=True)``):

- ``ddp``: ``DistributedDataParallel(model)``;
- ``hvd``: ``hvd.DistributedOptimizer(opt, named_parameters=...)`` as users get it (collectives negotiated, so
  that ``hvd.join()`` and the mismatch checks work: the layout's first step is agreed by every rank, later steps
  send their buckets on the layout's own gloo group with no control message);
- ``hvd_nojoin``: the same with ``JUPYTER_TORCHDIST_HOROVOD_JOIN=0`` (no negotiation: DDP's exact traffic on the
  default group, no ``join()``).

Each round runs every variant once on a fresh model (the order rotates each round, so drifting load hits every
variant alike); each times steps ``warmup``..``steps`` after a barrier. The value per variant and round is the mean
over ranks; the ratio is median(hvd) / median(ddp) (the median of the per-round ratios hvd_i / ddp_i is shown
beside it: rounds on a shared machine drift more than the variants differ). Each round also checks that the
variants end with the same weights (max |difference| of any parameter against DDP's).
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
VARIANTS = ("ddp", "hvd", "hvd_nojoin")
TARGET = 0.95


def parse_args() -> argparse.Namespace:
    ap = common.parser(__doc__)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--seconds", type=float, default=1.5, help="steady-state length to aim for, per variant and round")
    return ap.parse_args()


# -- on the ranks -------------------------------------------------------------------------------------------------
def _use_horovod(join: bool) -> None:
    """(Re)initialise the Horovod API on the launcher's group with the join protocol on or off."""
    import jupyter_torchdist.horovod as hvd

    hvd.shutdown()  # forgets the adopted group without destroying it
    os.environ["JUPYTER_TORCHDIST_HOROVOD_JOIN"] = "1" if join else "0"
    hvd.init()


def _wrapped(variant: str, kind: str) -> tuple[Any, Any, Any, Any]:
    """(model as trained, optimizer, x, y) for one variant, from the same seed."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    import jupyter_torchdist.horovod as hvd

    torch.manual_seed(0)
    model, x, y = jobs._model(kind)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if variant == "ddp":
        return DDP(model), opt, x, y
    _use_horovod(join=variant == "hvd")
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    return model, hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters()), x, y


def segment(variant: str, kind: str, steps: int, warmup: int) -> tuple[float, Any]:
    """One timed training segment: (steps/s of steps ``warmup``..``steps``, the final weights)."""
    import torch

    model, opt, x, y = _wrapped(variant, kind)
    rate, _ = jobs.timed_steps(model, opt, x, y, steps, warmup)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return rate, weights


def segment_rate(variant: str, kind: str, steps: int, warmup: int) -> float:
    return segment(variant, kind, steps, warmup)[0]


def compare(kind: str, steps: int, warmup: int, rounds: int) -> dict[str, Any]:
    """Every variant once per round, the order rotated each round: steps/s per variant, max abs(w - w_ddp) per round."""
    import torch

    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    diffs: list[float] = []
    for r in range(rounds):
        weights = {}
        for variant in VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]:  # rotated each round
            rate, weights[variant] = segment(variant, kind, steps, warmup)
            rates[variant].append(rate)
        diffs.append(max(float(torch.max(torch.abs(weights[v] - weights["ddp"]))) for v in VARIANTS[1:]))
    return {"rates": rates, "max_weight_diff": diffs, "threads": torch.get_num_threads()}


# -- in the driver ------------------------------------------------------------------------------------------------
def steps_per_run(kind: str, seconds: float) -> int:
    """Steps for about ``seconds`` of steady state, from a short DDP probe."""
    import jupyter_torchdist as jtd

    probe = jtd.run(segment_rate, "ddp", kind, WARMUP_STEPS + 30, WARMUP_STEPS, n=2, all_ranks=True)
    rate = sum(probe) / len(probe)
    steps = WARMUP_STEPS + max(50, int(rate * seconds))
    print(f"{kind}: ~{rate:.0f} steps/s in a short probe run -> {steps} steps per segment", flush=True)
    return steps


def measure(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """One run of ``compare`` on 2 ranks; per round, the mean over ranks."""
    import jupyter_torchdist as jtd

    steps = steps_per_run(kind, args.seconds)
    per_rank = jtd.run(compare, kind, steps, WARMUP_STEPS, args.rounds, n=2, all_ranks=True)
    rates = {v: [sum(r["rates"][v][i] for r in per_rank) / len(per_rank) for i in range(args.rounds)]
             for v in VARIANTS}
    for i in range(args.rounds):
        print("  round " + str(i) + ": " + ", ".join(f"{v} {rates[v][i]:.1f}" for v in VARIANTS) + " steps/s",
              flush=True)
    return {"steps": steps, "rates": rates, "threads": sorted({r["threads"] for r in per_rank}),
            "max_weight_diff": max(max(r["max_weight_diff"]) for r in per_rank)}


def print_table(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The table per model; returns the ``key=value`` summary."""
    rows, kv = [], {}
    for kind, res in results.items():
        med = {v: common.median(res["rates"][v]) for v in VARIANTS}
        paired = common.median([h / d for h, d in zip(res["rates"]["hvd"], res["rates"]["ddp"])])
        rows.append([kind, res["steps"], f"{med['ddp']:.1f}", f"{med['hvd']:.1f}", f"{med['hvd_nojoin']:.1f}",
                     f"{med['hvd'] / med['ddp']:.3f}", f"{paired:.3f}", f"{med['hvd_nojoin'] / med['ddp']:.3f}",
                     " ".join(f"{x:.1f}" for x in res["rates"]["ddp"]),
                     " ".join(f"{x:.1f}" for x in res["rates"]["hvd"]), f"{res['max_weight_diff']:.1e}",
                     res["threads"]])
        kv[f"{kind}_ratio"] = med["hvd"] / med["ddp"]
        kv[f"{kind}_paired_ratio"] = paired
        kv[f"{kind}_nojoin_ratio"] = med["hvd_nojoin"] / med["ddp"]
        kv[f"{kind}_ddp_steps_s"], kv[f"{kind}_hvd_steps_s"] = med["ddp"], med["hvd"]
        kv[f"{kind}_max_weight_diff"] = res["max_weight_diff"]
    print()
    print(common.table(["model", "steps/segment", "DDP steps/s", "hvd steps/s", "hvd JOIN=0 steps/s",
                        "hvd / DDP", "median of round ratios", "hvd JOIN=0 / DDP", "DDP rounds", "hvd rounds",
                        "max abs(w - w_DDP)", "torch threads per rank"], rows))
    return kv


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    info = common.begin("bench_horovod: steady-state steps/s, hvd.DistributedOptimizer vs DDP (2 ranks, gloo)")
    print(f"warm-up {common.warm_up():.2f} s", flush=True)
    results = {kind: measure(kind, args) for kind in args.models.split(",")}
    kv = print_table(results)
    print()
    for kind in results:
        r = kv[f"{kind}_ratio"]
        print(f"target {kind}_ratio >= {TARGET}: {r:.3f} {'MET' if r >= TARGET else 'MISSED'}")
    common.finish("bench_horovod", {"machine": info, "results": results, "kv": kv, "total_s": None,
                                    "rounds": args.rounds, "seconds": args.seconds}, started, kv)


if __name__ == "__main__":
    main()
