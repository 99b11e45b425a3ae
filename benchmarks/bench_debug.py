"""Issue #24: what the debugging machinery costs when nobody debugs, and how soon a hang is said.

    python benchmarks/bench_debug.py [--rounds 15] [--models mlp,cnn] [--seconds 0.75] [--stalls 3]

1. **Overhead**, side by side in the same 2 rank processes of one run (``jupyter_torchdist.run(..., all_ranks=True)``),
   the order alternating each round: ``on`` is a rank as shipped (torch.distributed's collectives and DDP's
   backward marked on the main thread, the mark sent with each usage reading, ``breakpoint()`` routed to the
   notebook), ``off`` the same rank with ``rank.collectives.uninstall()`` (torch as it is). Measured: DDP
   training steps/s of a small MLP and a small CNN (``jobs._model``, gloo), and the worst case for the marker,
   calls/s of ``all_reduce`` on a one-element tensor. The ratio is median(on) / median(off). Beside the rates,
   the rank process's CPU time per step (or call): on a machine shared with other work the wall clock of a
   round swings by tens of percent, the CPU a step takes much less.
   Beside them, in this process, the marker's own cost per call: a marked no-op against the bare no-op.
2. **Hang to notice**: ``--stalls`` runs of a rank-divergent collective (rank 0 in ``all_reduce``, rank 1 asleep)
   with ``--stall-after 5``; the seconds from rank 0 entering ``all_reduce`` (its own clock, printed) to the
   first snapshot that says the run is stalled, and to the first one with every rank's place.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common

jobs = common.register_jobs()
WARMUP_STEPS = 20
VARIANTS = ("on", "off")
STALL_AFTER_S = 5.0


def parse_args() -> argparse.Namespace:
    ap = common.parser(__doc__)
    ap.add_argument("--rounds", type=int, default=15, help="short rounds, many: neighbours in time share the load")
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--seconds", type=float, default=0.75, help="steady-state length per variant and round")
    ap.add_argument("--stalls", type=int, default=3, help="hang-to-notice runs")
    return ap.parse_args()


# -- on the ranks -------------------------------------------------------------------------------------------------
def _variant(name: str) -> None:
    from jupyter_torchdist.rank import collectives

    if name == "on":
        assert collectives.install(), "the marker is switched off (JUPYTER_TORCHDIST_DEBUG=0)"
    else:
        collectives.uninstall()


def _ddp_rate(kind: str, steps: int) -> float:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model, x, y = jobs._model(kind)
    ddp = DDP(model)
    return jobs.timed_steps(ddp, torch.optim.SGD(ddp.parameters(), lr=0.01), x, y, steps, WARMUP_STEPS)[0]


def _allreduce_rate(calls: int) -> float:
    import torch
    import torch.distributed as dist

    t = torch.ones(1)
    for _ in range(50):
        dist.all_reduce(t)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(t)
    return calls / (time.perf_counter() - t0)


def compare(kind: str, size: int, rounds: int) -> dict[str, list[float]]:
    """Each variant once per round, the order alternating: steps/s (DDP) or calls/s (``allreduce``) under the
    variant's name, and the process's CPU µs per step (or call) under ``cpu_<variant>``."""
    rates: dict[str, list[float]] = {k: [] for v in VARIANTS for k in (v, f"cpu_{v}")}
    for r in range(rounds):
        for variant in VARIANTS[r % 2:] + VARIANTS[:r % 2]:  # alternating (the ranks cannot import common)
            _variant(variant)
            cpu = time.process_time()
            rates[variant].append(_allreduce_rate(size) if kind == "allreduce" else _ddp_rate(kind, size))
            rates[f"cpu_{variant}"].append((time.process_time() - cpu) / size * 1e6)
    _variant("on")
    return rates


def diverge() -> None:
    """The classic hang: rank 0 waits in all_reduce for a peer that sleeps."""
    import torch
    import torch.distributed as dist

    t = torch.ones(1)
    print(f"entering {time.time():.6f}", flush=True)
    if dist.get_rank() == 0:
        dist.all_reduce(t)
    else:
        time.sleep(120)


# -- in the driver ------------------------------------------------------------------------------------------------
def size_for(kind: str, seconds: float) -> int:
    """Steps (or calls) for about ``seconds`` per segment, from a short probe with the machinery on."""
    import jupyter_torchdist as jtd

    probe = jtd.run(compare, kind, 200 if kind == "allreduce" else WARMUP_STEPS + 30, 1, n=2, all_ranks=True)
    rate = sum(sum(r["on"]) for r in probe) / len(probe)
    size = max(50, int(rate * seconds)) + (0 if kind == "allreduce" else WARMUP_STEPS)
    print(f"{kind}: ~{rate:.0f}/s in a short probe -> {size} per segment", flush=True)
    return size


def measure(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    import jupyter_torchdist as jtd

    size = size_for(kind, args.seconds)
    per_rank = jtd.run(compare, kind, size, args.rounds, n=2, all_ranks=True)
    rates = {k: [sum(r[k][i] for r in per_rank) / len(per_rank) for i in range(args.rounds)] for k in per_rank[0]}
    for i in range(args.rounds):
        print(f"  {kind} round {i}: on {rates['on'][i]:.1f}, off {rates['off'][i]:.1f} /s", flush=True)
    return {"size": size, "rates": rates}


def marker_cost_us(calls: int = 1_000_000) -> float:
    """µs a marked call costs over a bare one (the main thread's path: mark, call, clear), best of 5."""
    import threading

    from jupyter_torchdist.rank import collectives

    def bare(x: int) -> int:
        return x

    marked = collectives._marked("all_reduce", bare)
    collectives._marker.main = threading.get_ident()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for i in range(calls):
            bare(i)
        t1 = time.perf_counter()
        for i in range(calls):
            marked(i)
        best = min(best, ((time.perf_counter() - t1) - (t1 - t0)) / calls * 1e6)
    return best


class _Watch:
    """A view that notes when the run was first said stalled, and when every rank's place came with it."""
    log_tail = 5

    def __init__(self) -> None:
        self.stalled: float | None = None
        self.placed: float | None = None
        self.entered: float | None = None

    def start(self, snapshot: dict[str, Any]) -> None:
        pass

    def update(self, snapshot: dict[str, Any]) -> None:
        now = time.time()
        line = snapshot["ranks"][0]["last_line"]
        if self.entered is None and line.startswith("entering "):
            self.entered = float(line.split()[1])
        if snapshot.get("stall") and self.stalled is None:
            self.stalled = now
        if self.stalled and self.placed is None and all(r.get("place") for r in snapshot["ranks"]):
            self.placed = now

    finish = update


def hang_to_notice(runs: int) -> list[dict[str, float]]:
    from jupyter_torchdist.core.errors import RunTimeout
    from jupyter_torchdist.kernel.runs.driver import Work, launch
    from jupyter_torchdist.core.options import RunOptions

    out = []
    for i in range(runs):
        watch = _Watch()
        try:
            launch(Work(diverge), RunOptions(n=2, local=True, timeout=STALL_AFTER_S + 8, stall_after=STALL_AFTER_S),
                   watch)
        except RunTimeout:
            pass
        if watch.entered is None or watch.stalled is None or watch.placed is None:
            print(f"  stall run {i}: not said ({watch.__dict__})", flush=True)
            continue
        said, placed = watch.stalled - watch.entered, watch.placed - watch.entered
        print(f"  stall run {i}: said {said:.2f} s after the hang began, every place {placed:.2f} s", flush=True)
        out.append({"said_s": said, "placed_s": placed})
    return out


def print_table(results: dict[str, dict[str, Any]], stalls: list[dict[str, float]]) -> dict[str, Any]:
    rows, kv = [], {}
    for kind, res in results.items():
        on, off = (common.median(res["rates"][v]) for v in VARIANTS)
        paired = common.median([a / b for a, b in zip(res["rates"]["on"], res["rates"]["off"])])
        unit = "calls/s" if kind == "allreduce" else "steps/s"
        extra = f"{(1 / on - 1 / off) * 1e6:+.2f} µs per call" if kind == "allreduce" else ""
        cpu_on, cpu_off = (common.median(res["rates"][f"cpu_{v}"]) for v in VARIANTS)
        rounds = [" ".join(f"{x:.0f}" for x in res["rates"][v]) for v in VARIANTS]
        rows.append([kind, unit, f"{on:.1f}", f"{off:.1f}", f"{on / off:.3f}", f"{paired:.3f}",
                     f"{cpu_on:.0f} / {cpu_off:.0f} ({cpu_on / cpu_off:.3f})", extra, *rounds])
        kv[f"{kind}_on"], kv[f"{kind}_off"], kv[f"{kind}_ratio"] = on, off, on / off
        kv[f"{kind}_cpu_ratio"] = cpu_on / cpu_off
    print()
    print(common.table(["workload", "unit", "on (median)", "off (median)", "on / off", "median of round ratios",
                        "CPU µs per step, on / off", "cost", "on rounds", "off rounds"], rows))
    if stalls:
        kv["stall_said_s"] = common.median([s["said_s"] for s in stalls])
        kv["stall_placed_s"] = common.median([s["placed_s"] for s in stalls])
        print(f"\nhang to notice with --stall-after {STALL_AFTER_S:g}: said after {kv['stall_said_s']:.2f} s, every "
              f"rank's place after {kv['stall_placed_s']:.2f} s (medians of {len(stalls)})")
    return kv


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    info = common.begin("bench_debug: the debugging machinery's cost (on vs off, same ranks) and hang to notice")
    kinds = [k for k in re.split(r",\s*", args.models) if k] + ["allreduce"]
    results = {kind: measure(kind, args) for kind in kinds}
    stalls = hang_to_notice(args.stalls)
    kv = print_table(results, stalls)
    kv["marker_us_per_call"] = marker_cost_us()
    print(f"the marker's own cost: {kv['marker_us_per_call']:.3f} µs per marked call (this process, best of 5)")
    print()
    common.check_targets(kv, [(f"{k}_ratio", 0.97, True) for k in kinds if k != "allreduce"]
                         + ([("stall_said_s", STALL_AFTER_S + 3, False)] if stalls else []))
    common.finish("bench_debug", {"machine": info, "results": results, "stalls": stalls, "kv": kv,
                                  "rounds": args.rounds, "seconds": args.seconds}, started, kv)


if __name__ == "__main__":
    main()
