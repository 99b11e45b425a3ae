"""Issue #13, item 5: steady-state steps/s of jupyter_torchdist.horovod's DistributedOptimizer against DDP.

    python benchmarks/bench_horovod.py [--rounds 5] [--models mlp,cnn] [--seconds 2] [--interleaved-steps 300]

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
beside it: rounds on a shared machine drift more than the variants differ), and each variant's CPU time per step
(the process's, all threads: what a variant itself costs, which the load of other work moves much less). Each
round also checks that the variants end with the same weights (max |difference| of any parameter against DDP's).

Then DDP and ``hvd`` again, side by side in the same ranks one step each in turn (``interleaved``): the median
milliseconds per step of each. On a machine shared with other work this ratio is the steadier one, since two
consecutive steps see the same load while whole segments do not.
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
    ap.add_argument("--interleaved-steps", type=int, default=300,
                    help="steps of DDP and of hvd, one each in turn, timed step by step (0: skip)")
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


def segment(variant: str, kind: str, steps: int, warmup: int) -> tuple[float, float, Any]:
    """One timed training segment: (steps/s and this process's CPU ms per step, all threads, over steps
    ``warmup``..``steps``; the final weights). The CPU time shows a variant's own cost (its Python, its
    collectives' threads) where the steps/s of a machine shared with other work drift by more than that."""
    import torch

    model, opt, x, y = _wrapped(variant, kind)
    jobs.timed_steps(model, opt, x, y, warmup, warmup - 1)
    cpu = time.process_time()
    rate, _ = jobs.timed_steps(model, opt, x, y, steps - warmup + 1, 1)
    cpu_ms = (time.process_time() - cpu) / (steps - warmup + 1) * 1e3
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return rate, cpu_ms, weights


def segment_rate(variant: str, kind: str, steps: int, warmup: int) -> float:
    return segment(variant, kind, steps, warmup)[0]


def compare(kind: str, steps: int, warmup: int, rounds: int) -> dict[str, Any]:
    """Every variant once per round, the order rotated each round: steps/s per variant, max abs(w - w_ddp) per round."""
    import torch

    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    diffs: list[float] = []
    for r in range(rounds):
        weights = {}
        for variant in VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]:  # rotated each round
            rate, cpu_ms, weights[variant] = segment(variant, kind, steps, warmup)
            rates[variant].append(rate)
            cpu[variant].append(cpu_ms)
        diffs.append(max(float(torch.max(torch.abs(weights[v] - weights["ddp"]))) for v in VARIANTS[1:]))
    return {"rates": rates, "cpu_ms": cpu, "max_weight_diff": diffs, "threads": torch.get_num_threads()}


def interleaved(kind: str, steps: int) -> dict[str, dict[str, list[float]]]:
    """DDP and ``hvd`` trained side by side in the same ranks, one step each in turn (the order swapped every
    step), each step started together on both ranks (a barrier, untimed) as steps of a training loop start once
    the previous step's allreduce has joined the ranks: every step's wall and CPU milliseconds. Consecutive steps
    share the machine's load, so their ratio holds where whole segments drift with what else the machine runs."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import jupyter_torchdist.horovod as hvd

    _use_horovod(join=True)
    runs = {}
    for variant in ("ddp", "hvd"):
        torch.manual_seed(0)
        model, x, y = jobs._model(kind)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        if variant == "ddp":
            runs[variant] = (DDP(model), opt, x, y)
        else:
            runs[variant] = (model, hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters()), x, y)
    loss_fn = torch.nn.CrossEntropyLoss()
    out: dict[str, dict[str, list[float]]] = {"wall": {v: [] for v in runs}, "cpu": {v: [] for v in runs}}
    for step in range(WARMUP_STEPS + steps):
        for variant in ("ddp", "hvd") if step % 2 else ("hvd", "ddp"):
            model, opt, x, y = runs[variant]
            dist.barrier()
            wall, cpu = time.perf_counter(), time.process_time()
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()
            if step >= WARMUP_STEPS:
                out["wall"][variant].append((time.perf_counter() - wall) * 1e3)
                out["cpu"][variant].append((time.process_time() - cpu) * 1e3)
    return out


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
    rates, cpu = ({v: [sum(r[key][v][i] for r in per_rank) / len(per_rank) for i in range(args.rounds)]
                   for v in VARIANTS} for key in ("rates", "cpu_ms"))
    for i in range(args.rounds):
        print("  round " + str(i) + ": " + ", ".join(f"{v} {rates[v][i]:.1f}" for v in VARIANTS) + " steps/s; "
              + ", ".join(f"{v} {cpu[v][i]:.2f}" for v in VARIANTS) + " CPU ms/step", flush=True)
    return {"steps": steps, "rates": rates, "cpu_ms": cpu, "threads": sorted({r["threads"] for r in per_rank}),
            "max_weight_diff": max(max(r["max_weight_diff"]) for r in per_rank)}


def measure_interleaved(kind: str, steps: int) -> dict[str, float]:
    """``interleaved`` on 2 ranks: per variant the median ms per step (the mean over ranks of each rank's)."""
    import jupyter_torchdist as jtd

    per_rank = jtd.run(interleaved, kind, steps, n=2, all_ranks=True)
    return {f"{key}_{v}": sum(common.median(r[key][v]) for r in per_rank) / len(per_rank)
            for key in ("wall", "cpu") for v in ("ddp", "hvd")}


def print_interleaved(results: dict[str, dict[str, float]], steps: int) -> dict[str, float]:
    rows, kv = [], {}
    for kind, res in results.items():
        ratio = res["wall_ddp"] / res["wall_hvd"]
        rows.append([kind, steps, f"{res['wall_ddp']:.2f}", f"{res['wall_hvd']:.2f}", f"{ratio:.3f}",
                     f"{res['cpu_ddp']:.2f}", f"{res['cpu_hvd']:.2f}"])
        kv[f"{kind}_interleaved_ratio"] = ratio
        kv.update({f"{kind}_interleaved_{k}_ms": v for k, v in res.items()})
    print()
    print(common.table(["model", "steps each", "DDP ms/step", "hvd ms/step", "hvd / DDP steps/s",
                        "DDP CPU ms/step", "hvd CPU ms/step"], rows))
    return kv


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
        for v in VARIANTS:
            kv[f"{kind}_{v}_cpu_ms_per_step"] = common.median(res["cpu_ms"][v])
    print()
    print(common.table(["model", "steps/segment", "DDP steps/s", "hvd steps/s", "hvd JOIN=0 steps/s",
                        "hvd / DDP", "median of round ratios", "hvd JOIN=0 / DDP", "DDP rounds", "hvd rounds",
                        "max abs(w - w_DDP)", "torch threads per rank"], rows))
    print()
    print(common.table(["model"] + [f"{v} CPU ms/step" for v in VARIANTS] + ["hvd - DDP", "hvd - hvd JOIN=0"],
                       [[kind] + [f"{kv[f'{kind}_{v}_cpu_ms_per_step']:.2f}" for v in VARIANTS]
                        + [f"{kv[f'{kind}_hvd_cpu_ms_per_step'] - kv[f'{kind}_{v}_cpu_ms_per_step']:+.2f}"
                           for v in ("ddp", "hvd_nojoin")] for kind in results]))
    return kv


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    info = common.begin("bench_horovod: steady-state steps/s, hvd.DistributedOptimizer vs DDP (2 ranks, gloo)")
    print(f"warm-up {common.warm_up():.2f} s", flush=True)
    kinds = args.models.split(",")
    side_by_side = {kind: measure_interleaved(kind, args.interleaved_steps) for kind in kinds
                    } if args.interleaved_steps else {}
    results = {kind: measure(kind, args) for kind in kinds} if args.rounds else {}
    kv = print_table(results) if results else {}
    kv.update(print_interleaved(side_by_side, args.interleaved_steps) if side_by_side else {})
    print()
    for key in sorted(k for k in kv if k.endswith("_ratio") and "nojoin" not in k and "paired" not in k):
        print(f"target {key} >= {TARGET}: {kv[key]:.3f} {'MET' if kv[key] >= TARGET else 'MISSED'}")
    common.finish("bench_horovod", {"machine": info, "results": results, "interleaved": side_by_side, "kv": kv,
                                    "total_s": None, "rounds": args.rounds, "seconds": args.seconds}, started, kv)


if __name__ == "__main__":
    main()
