"""Issue 22: what surviving a lost rank costs, side by side in one run (2 ranks, --local, DDP on gloo).

    python benchmarks/bench_restarts.py [--rounds 3] [--steps 300] [--big-steps 6]

1. The small model (jobs' MLP): steps/s with no commits, with ``jt.commit(step, every=50, model=..., optimizer=...)``
   and with a commit every step, alternating by round. Target: every=50 costs under 5% of step time.
2. A 100M-parameter model (Linear(10000, 10000), SGD with momentum): the seconds one commit holds the training
   thread (serialising) and the seconds it takes in all (the background write), against the step time.
3. From a rank's loss to training again: rank 1 is SIGKILLed at step 40 (first attempt); the time from its death
   to the restarted ranks' first step after ``jt.restore``, and the run's whole extra time against a run without
   the kill.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common

import jupyter_torchdist as jt


def parse_args() -> argparse.Namespace:
    ap = common.parser(__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300, help="small-model steps per run")
    ap.add_argument("--big-steps", type=int, default=6, help="100M-model steps per run (one commit each)")
    return ap.parse_args()


def small(steps: int, every: int | None) -> dict[str, Any]:
    """The MLP's DDP steps/s over the last two thirds of the run, committing every ``every`` steps (None: never)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                    torch.nn.ReLU(), torch.nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    start = jt.restore(model=model, optimizer=opt)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    began = None
    for step in range(start, steps):
        if step == steps // 3:
            dist.barrier()
            began = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if every is not None:
            jt.commit(step + 1, every=every, model=model, optimizer=opt)
    measured = steps - steps // 3
    return {"steps_per_s": measured / (time.perf_counter() - (began or time.perf_counter()))}


def big(steps: int) -> dict[str, Any]:
    """A 100M-parameter model: step time, and one commit's time on the training thread and in all."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from jupyter_torchdist.rank.runtime import current

    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(10_000, 10_000))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    x = torch.randn(8, 10_000)
    step_s, held_s, whole_s = [], [], []
    for step in range(steps):
        t0 = time.perf_counter()
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        dist.barrier()
        step_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        jt.commit(step + 1, model=model, optimizer=opt)
        held_s.append(time.perf_counter() - t0)
        runtime = current()
        if runtime is not None and runtime.checkpoints is not None:
            runtime.checkpoints.flush()  # measured here: how long the background write takes in all
        whole_s.append(time.perf_counter() - t0)
    return {"step_s": common.median(step_s[1:]), "commit_held_s": common.median(held_s[1:]),
            "commit_total_s": common.median(whole_s[1:])}


def killed(steps: int, stamps: str, kill_at: int | None) -> dict[str, Any]:
    """The small model; rank 1 dies at step ``kill_at`` of the first attempt; every attempt's start is stamped."""
    import signal

    import torch
    import torch.distributed as dist

    torch.manual_seed(0)
    model = torch.nn.Linear(64, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = jt.restore(model=model, optimizer=opt)
    with open(f"{stamps}/rank{dist.get_rank()}-from{start}", "w") as f:
        f.write(str(time.time()))
    for step in range(start, steps):
        loss = model(torch.randn(32, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        jt.commit(step + 1, every=10, model=model, optimizer=opt)
        if step == kill_at and start == 0 and dist.get_rank() == 1:
            time.sleep(0.5)  # the step-40 commit is written meanwhile
            with open(f"{stamps}/killed", "w") as f:
                f.write(str(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
    return {"start": start}


def _small_rounds(args: argparse.Namespace) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"none": [], "every50": [], "every1": []}
    kinds = {"none": None, "every50": 50, "every1": 1}
    for r in range(args.rounds):
        for kind in common.rotated(list(kinds), r):
            restarts = 0 if kinds[kind] is None else 1  # a checkpoint folder only where commits are made
            value = jt.run(small, args.steps, kinds[kind], n=2, local=True, max_restarts=restarts)
            out[kind].append(value["steps_per_s"])
    return out


def _restart_time(steps: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as stamps:
        t0 = time.perf_counter()
        result = jt.run_detailed(killed, steps, stamps, 40, n=2, local=True, max_restarts=1)
        with_kill = time.perf_counter() - t0
        died = float(open(f"{stamps}/killed").read())
        again = min(float(open(os.path.join(stamps, p)).read()) for p in os.listdir(stamps)
                    if "-from" in p and not p.endswith("-from0"))
    with tempfile.TemporaryDirectory() as stamps:
        t0 = time.perf_counter()
        jt.run(killed, steps, stamps, None, n=2, local=True, max_restarts=1)
        plain = time.perf_counter() - t0
    return {"loss_to_training_s": again - died, "run_with_kill_s": with_kill, "run_plain_s": plain,
            "attempts": float(len(result.attempts) + 1)}


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    info = common.begin("bench_restarts: jt.commit's cost and the time from a lost rank to training again")
    jt.run(small, 30, None, n=2, local=True)  # warm: the local server and its imports
    rates = _small_rounds(args)
    med = {k: common.median(v) for k, v in rates.items()}
    print(common.table(["commits", "steps/s (each round)", "median", "vs none"],
                       [[k, common.fmt_list(v), f"{med[k]:.1f}", f"{med[k] / med['none']:.3f}"]
                        for k, v in rates.items()]))
    big_values = jt.run(big, args.big_steps, n=2, local=True, max_restarts=1)
    print(common.table(["100M model", "seconds"], [[k, f"{v:.3f}"] for k, v in big_values.items()]))
    restart = _restart_time(300)
    print(common.table(["restart", "value"], [[k, f"{v:.2f}"] for k, v in restart.items()]))
    values = {"small_every50_cost": 1 - med["every50"] / med["none"],
              "small_every1_cost": 1 - med["every1"] / med["none"],
              **{f"big_{k}": v for k, v in big_values.items()},
              "big_commit_held_per_step_at_50": big_values["commit_held_s"] / 50 / big_values["step_s"], **restart}
    common.check_targets(values, [("small_every50_cost", 0.05, False)])
    common.finish("bench_restarts", {"machine": info, "small": rates, "values": values}, started, values)


if __name__ == "__main__":
    main()
