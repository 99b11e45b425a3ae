"""Issue #3, item 2: how our latency grows with the number of ranks and with the captured payload.

    python benchmarks/bench_scaling.py [--runs 5] [--ranks 1,2,4,8] [--payload-mb 0.001,10,100] [--torchrun-runs 1]

One process, one embedded SparkSession created first (``get_session()``: the embedded session has
all its slots from the start), then the extension's warm-up. Ranks: the trivial DDP job at n = 1, 2,
4, 8 (the first run at each n is reported apart, then ``--runs`` round-robin rounds). Payload: the
same job at n = 2 with a captured float32 tensor of 1 KB, 10 MB and 100 MB
(``functools.partial(jobs.with_payload, blob)``, handed to ``jupyter_torchdist.run``); ``pack`` (the
kernel-side pickling) is timed apart. Every run of ours records its phases (phases.py), so the tables
say which phase grows. torchrun at the same rank counts is the reference (``--torchrun-runs`` runs each; 0 skips it).
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common
import phases

jobs = common.register_jobs()
PAUSE_S = 0.3


def parse_args() -> argparse.Namespace:
    ap = common.parser(__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ranks", default="1,2,4,8")
    ap.add_argument("--payload-mb", default="0.001,10,100")
    ap.add_argument("--torchrun-runs", type=int, default=1)
    return ap.parse_args()


def start_session() -> tuple[Any, float, float]:
    """The embedded session first, then the warm-up: (spark, session seconds, warm-up seconds)."""
    from jupyter_torchdist.launchers.session import embedded as backend

    t0 = time.perf_counter()
    spark, _ = backend.get_session()
    session_s = time.perf_counter() - t0
    warm_s = common.warm_up()
    print(f"session {spark.sparkContext.master} started in {session_s:.2f} s, warm-up {warm_s:.2f} s", flush=True)
    return spark, session_s, warm_s


def label(mb: float) -> str:
    return f"{mb * 1024:.0f}KB" if mb < 1 else f"{mb:.0f}MB"


def rank_name(n: int) -> str:
    return f"n={n}"


class Series:
    """Our runs of one job per key (a rank count or a payload): the first run at each key, then
    ``runs`` round-robin rounds (the order rotates each round) with their phase groups."""

    def __init__(self, keys: list[Any]) -> None:
        self.keys = keys
        self.first: dict[Any, float] = {}
        self.times: dict[Any, list[float]] = {k: [] for k in keys}
        self.phases: dict[Any, list[dict[str, float]]] = {k: [] for k in keys}

    def measure(self, spark: Any, job: Callable[[Any], tuple[Any, int]], runs: int,
                name: Callable[[Any], str]) -> None:
        """``job(key)`` gives (function, ranks) to run for that key; prints one line per round."""
        for key in self.keys:
            time.sleep(PAUSE_S)
            self.first[key] = common.timed_run(spark, *job(key))[0]
        for r in range(runs):
            for key in common.rotated(self.keys, r):
                time.sleep(PAUSE_S)
                dt, _, groups = common.timed_run(spark, *job(key))
                self.times[key].append(dt)
                self.phases[key].append(groups)
            print(f"round {r}: " + ", ".join(f"{name(k)} {self.times[k][-1]:.3f}" for k in self.keys), flush=True)

    def median_phases(self) -> dict[Any, dict[str, float]]:
        return {k: phases.median_groups(self.phases[k]) for k in self.keys}


def torchrun_times(ranks: list[int], runs: int) -> dict[int, list[float]]:
    """torchrun of the same job at each rank count, ``runs`` times each (the reference)."""
    tr_n: dict[int, list[float]] = {n: [] for n in ranks}
    for _ in range(runs):
        for n in ranks:
            time.sleep(PAUSE_S)
            tr_n[n].append(common.run_torchrun("trivial_ddp", {}, nproc=n, env=common.LOOPBACK_ENV)[0])
        print("torchrun: " + ", ".join(f"n={n} {tr_n[n][-1]:.2f}" for n in ranks), flush=True)
    return tr_n


def payload_fns(sizes: list[float]) -> tuple[dict[float, Any], dict[float, float], dict[float, int]]:
    """The job with a captured float32 tensor of each size, and what packing it costs: (functions, pack
    seconds, pickled bytes)."""
    import torch

    from jupyter_torchdist.kernel.pickling import pack

    fns: dict[float, Any] = {}
    pack_s: dict[float, float] = {}
    payload_bytes: dict[float, int] = {}
    for mb in sizes:
        blob = torch.randn(max(1, int(mb * (1 << 20)) // 4))
        fns[mb] = functools.partial(jobs.with_payload, blob)
        dt, data = common.timed(functools.partial(pack, fns[mb], (), {}, max_bytes=1 << 31))
        pack_s[mb], payload_bytes[mb] = dt, len(data)
        del data
    return fns, pack_s, payload_bytes


def phase_table(title: str, columns: list[str], groups: list[dict[str, float]]) -> None:
    """Median ms of each phase group (rows) per key (columns)."""
    names = [g[0] for g in phases.GROUPS]
    print(f"\n{title} (ms, medians):")
    print(common.table(["phase"] + columns,
                       [[g] + [f"{1000 * gm.get(g, float('nan')):.0f}" for gm in groups] for g in names]))


def print_ranks(by_n: Series, tr_n: dict[int, list[float]]) -> None:
    ranks, times = by_n.keys, by_n.times
    base = common.median(times[2]) if 2 in times else common.median(times[ranks[0]])
    print("\n## latency vs ranks (trivial DDP job; seconds)")
    rows = []
    for n in ranks:
        med = common.median(times[n])
        rows.append([n, common.fmt_s(by_n.first[n]), common.fmt_s(med), common.fmt_s(min(times[n])),
                     common.fmt_s(max(times[n])), f"{med / base:.2f}",
                     common.fmt_s(common.median(tr_n[n])) if tr_n[n] else "-",
                     f"{common.median(tr_n[n]) / med:.0f}x" if tr_n[n] else "-"])
    print(common.table(["ranks", "first s", "median s", "min s", "max s", "vs n=2", "torchrun s", "torchrun / ours"],
                       rows))
    gm_n = by_n.median_phases()
    phase_table("phases vs ranks", [rank_name(n) for n in ranks], [gm_n[n] for n in ranks])


def print_payloads(by_p: Series, pack_s: dict[float, float], payload_bytes: dict[float, int]) -> None:
    sizes, times = by_p.keys, by_p.times
    print("\n## latency vs captured payload (n=2; seconds)")
    rows = []
    base_p = common.median(times[sizes[0]])
    for mb in sizes:
        med = common.median(times[mb])
        rows.append([label(mb), f"{payload_bytes[mb]:,}", f"{1000 * pack_s[mb]:.1f}", common.fmt_s(by_p.first[mb]),
                     common.fmt_s(med), common.fmt_s(min(times[mb])), common.fmt_s(max(times[mb])),
                     f"+{med - base_p:.3f}"])
    print(common.table(["payload", "pickled bytes", "pack ms", "first s", "median s", "min s", "max s",
                        "vs smallest"], rows))
    gm_p = by_p.median_phases()
    phase_table("phases vs payload", [label(mb) for mb in sizes], [gm_p[mb] for mb in sizes])


def key_values(by_n: dict[int, list[float]], by_p: dict[float, list[float]]) -> dict[str, Any]:
    """The ``key=value`` summary: medians, n=8 over n=2, ms per extra rank and per payload MB."""
    kv: dict[str, Any] = {f"n{n}_s": common.median(xs) for n, xs in by_n.items()}
    if 8 in by_n and 2 in by_n:
        kv["n8_over_n2"] = common.median(by_n[8]) / common.median(by_n[2])
    if 1 in by_n and 8 in by_n:
        kv["per_extra_rank_ms"] = 1000 * (common.median(by_n[8]) - common.median(by_n[1])) / 7
    sizes = list(by_p)
    for mb in sizes:
        kv[f"payload_{label(mb)}_s"] = common.median(by_p[mb])
    if len(sizes) > 1:
        big, small = sizes[-1], sizes[0]
        kv["ms_per_payload_mb"] = 1000 * (common.median(by_p[big]) - common.median(by_p[small])) / (big - small)
    return kv


def main() -> None:
    args = parse_args()
    ranks = [int(x) for x in args.ranks.split(",")]
    sizes = [float(x) for x in args.payload_mb.split(",")]
    started = time.perf_counter()
    info = common.begin("bench_scaling: latency vs ranks and vs captured payload (ours; torchrun for reference)")
    spark, session_s, warm_s = start_session()
    by_n = Series(ranks)
    by_n.measure(spark, lambda n: (jobs.trivial_ddp, n), args.runs, rank_name)
    tr_n = torchrun_times(ranks, args.torchrun_runs)
    fns, pack_s, payload_bytes = payload_fns(sizes)
    by_p = Series(sizes)
    by_p.measure(spark, lambda mb: (fns[mb], 2), args.runs, label)
    print_ranks(by_n, tr_n)
    print_payloads(by_p, pack_s, payload_bytes)
    kv = key_values(by_n.times, by_p.times)
    common.finish("bench_scaling", {
        "machine": info, "session_s": session_s, "warmup_s": warm_s, "ranks": ranks, "first": by_n.first,
        "by_n": by_n.times, "phases_n": by_n.median_phases(), "torchrun_n": tr_n, "sizes_mb": sizes,
        "payload_bytes": payload_bytes, "pack_s": pack_s, "first_p": by_p.first,
        "by_p": {label(k): v for k, v in by_p.times.items()},
        "phases_p": {label(k): v for k, v in by_p.median_phases().items()}, "kv": kv}, started, kv)


if __name__ == "__main__":
    main()
