"""Issue 44: sweeps that search and stop members early, side by side in one run.

    python benchmarks/bench_sweep_search.py [--members 16] [--steps 27] [--step-s 0.1] [--trials 20] [--seeds 5]

A 2-rank toy problem (local processes, gloo): the loss falls with the steps as 1/sqrt(step) and depends on ``lr``
(lowest at 10^-1.5) and ``momentum`` (lowest at 0.9); every step is a barrier and ``--step-s`` of work.

1. ASHA against run-to-the-end: the same ``--members`` draws of ``lr`` (a random search, one seed), once with
   ``--early-stop asha --grace 1 --reduction-factor 3`` and once without, one member at a time (2 ranks on 2
   cores), run to the end first. Targets: ASHA's wall time at most 0.5x; the best member's parameters the same.
2. Optuna against random: ``--trials`` members over ``lr`` and ``momentum`` (quick members: 3 steps, no work),
   2 at a time, for each of ``--seeds`` seeds. Target: Optuna's median best loss (over the seeds) below random's.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common

import jupyter_torchdist as jt

common.register_by_value(sys.modules[__name__])


def toy(lr: float, momentum: float = 0.9, steps: int = 27, step_s: float = 0.1) -> float:
    """The toy training loop: a loss that falls with the steps, lowest at lr = 10^-1.5 and momentum = 0.9."""
    import math
    import time

    import torch.distributed as dist

    floor = 0.05 + (math.log10(lr) + 1.5) ** 2 + 3.0 * (momentum - 0.9) ** 2
    loss = floor
    for step in range(1, steps + 1):
        loss = floor * (1.0 + 2.0 / math.sqrt(step))
        dist.barrier()
        jt.report(step=step, loss=loss)
        time.sleep(step_s)
    return loss


def parse_args() -> argparse.Namespace:
    ap = common.parser(__doc__)
    ap.add_argument("--members", type=int, default=16)
    ap.add_argument("--steps", type=int, default=27)
    ap.add_argument("--step-s", type=float, default=0.1)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seeds", type=int, default=5)
    return ap.parse_args()


def asha_vs_full(args: argparse.Namespace) -> dict[str, Any]:
    space = {"lr": jt.loguniform(1e-4, 1.0)}
    common_kw = dict(trials=args.members, seed=1, concurrent=1, steps=args.steps, step_s=args.step_s)
    out: dict[str, Any] = {}
    for kind in ("full", "asha"):
        extra = {"early_stop": "asha", "grace": 1, "reduction_factor": 3} if kind == "asha" else {}
        seconds, s = _sweep_space(space, common_kw, extra)
        rows = s.rows()
        out[kind] = {"seconds": round(seconds, 2), "best": s.best().params,
                     "stopped_early": sum(r["state"] == "stopped_early" for r in rows),
                     "steps": sum(r.get("steps") or 0 for r in rows)}
        print(f"{kind}: {seconds:.1f} s, best {out[kind]['best']}, stopped early {out[kind]['stopped_early']} of "
              f"{len(rows)}, "
              f"{out[kind]['steps']} steps in all", flush=True)
    out["ratio"] = round(out["asha"]["seconds"] / out["full"]["seconds"], 3)
    out["same_best"] = out["asha"]["best"] == out["full"]["best"]
    return out


def _sweep_space(space: dict[str, Any], kw: dict[str, Any], extra: dict[str, Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    s = jt.sweep(toy, space, n=2, local=True, **kw, **extra)
    if not s.wait(3600):
        raise RuntimeError("the sweep did not end in an hour")
    return time.perf_counter() - t0, s


def optuna_vs_random(args: argparse.Namespace) -> dict[str, Any]:
    space = {"lr": jt.loguniform(1e-5, 1.0), "momentum": jt.uniform(0.0, 0.99)}
    best: dict[str, list[float]] = {"random": [], "optuna": []}
    for seed in range(args.seeds):
        for kind in common.rotated(["random", "optuna"], seed):
            seconds, s = _sweep_space(space, dict(trials=args.trials, seed=seed, concurrent=2, steps=3, step_s=0.0),
                                      {"search": kind})
            figure = min(r["loss_final"] for r in s.rows() if r["loss_final"] is not None)
            best[kind].append(figure)
            print(f"seed {seed} {kind}: best loss {figure:.4f} ({seconds:.1f} s)", flush=True)
    return {"best": best, "median_random": statistics.median(best["random"]),
            "median_optuna": statistics.median(best["optuna"])}


def main() -> None:
    args = parse_args()
    info = common.begin("Sweeps that search and stop members early (issue 44)")
    started = time.perf_counter()
    stopping = asha_vs_full(args)
    searching = optuna_vs_random(args)
    print(common.table(["", "wall s", "best params", "stopped early", "steps"],
                       [[k, stopping[k]["seconds"], stopping[k]["best"], stopping[k]["stopped_early"],
                         stopping[k]["steps"]] for k in ("full", "asha")]))
    print(common.table(["search", "best loss per seed", "median"],
                       [[k, common.fmt_list(searching["best"][k]), f"{searching[f'median_{k}']:.4f}"]
                        for k in ("random", "optuna")]))
    values = {"asha_over_full": stopping["ratio"], "same_best": stopping["same_best"],
              "optuna_median_best": searching["median_optuna"], "random_median_best": searching["median_random"]}
    common.check_targets({"asha_over_full": stopping["ratio"]}, [("asha_over_full", 0.5, False)])
    print(f"target same best member: {'MET' if stopping['same_best'] else 'MISSED'}")
    better = searching["median_optuna"] < searching["median_random"]
    print(f"target optuna median best < random's: {'MET' if better else 'MISSED'}")
    common.finish("bench_sweep_search", {"machine": info, "args": vars(args), "stopping": stopping,
                                         "search": searching}, started, values)


if __name__ == "__main__":
    main()
