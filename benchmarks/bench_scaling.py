"""Issue #3, item 2: how our latency grows with the number of ranks and with the captured payload.

    python benchmarks/bench_scaling.py [--runs 5] [--ranks 1,2,4,8] [--payload-mb 0.001,10,100] [--torchrun-runs 1]

One process, one embedded SparkSession created first with 8 slots (``get_session(8)`` -> local[8]),
then the extension's warm-up. Ranks: the trivial DDP job at n = 1, 2, 4, 8 (the first run at each n
is reported apart, then ``--runs`` round-robin rounds). Payload: the same job at n = 2 with a
captured float32 tensor of 1 KB, 10 MB and 100 MB (``functools.partial(jobs.with_payload, blob)``,
handed to ``jupyter_torchdist.run``); ``pack`` (the kernel-side pickling) is timed apart. Every run
of ours records its phases (phases.py), so the tables say which phase grows. torchrun at the same
rank counts is the reference (``--torchrun-runs`` runs each; 0 skips it).
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import phases  # noqa: E402

jobs = common.register_jobs()
PAUSE_S = 0.3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ranks", default="1,2,4,8")
    ap.add_argument("--payload-mb", default="0.001,10,100")
    ap.add_argument("--torchrun-runs", type=int, default=1)
    args = ap.parse_args()
    ranks = [int(x) for x in args.ranks.split(",")]
    sizes = [float(x) for x in args.payload_mb.split(",")]
    started = time.perf_counter()
    common.wait_for_quiet()
    info = common.machine()
    common.header("bench_scaling: latency vs ranks and vs captured payload (ours; torchrun for reference)", info)

    import torch

    import jupyter_torchdist as jtd
    from jupyter_torchdist.capture import pack
    from jupyter_torchdist.launchers import spark as backend

    t0 = time.perf_counter()
    spark, _ = backend.get_session(max(ranks))
    session_s = time.perf_counter() - t0
    warm_s, _ = common.timed(lambda: backend.warm_up_async().join())
    print(f"session {spark.sparkContext.master} started in {session_s:.2f} s, warm-up {warm_s:.2f} s", flush=True)

    def ours(fn: Any, n: int) -> tuple[float, dict[str, float]]:
        with phases.record(spark) as rec:
            t = time.perf_counter()
            jtd.run(fn, n=n)
            dt = time.perf_counter() - t
        return dt, rec.groups()

    # -- ranks ----------------------------------------------------------------------------------------------------
    first: dict[int, float] = {}
    by_n: dict[int, list[float]] = {n: [] for n in ranks}
    ph_n: dict[int, list[dict[str, float]]] = {n: [] for n in ranks}
    for n in ranks:
        time.sleep(PAUSE_S)
        first[n], _ = ours(jobs.trivial_ddp, n)
    for r in range(args.runs):
        for n in ranks[r % len(ranks):] + ranks[:r % len(ranks)]:
            time.sleep(PAUSE_S)
            dt, g = ours(jobs.trivial_ddp, n)
            by_n[n].append(dt)
            ph_n[n].append(g)
        print(f"round {r}: " + ", ".join(f"n={n} {by_n[n][-1]:.3f}" for n in ranks), flush=True)
    tr_n: dict[int, list[float]] = {n: [] for n in ranks}
    for _ in range(args.torchrun_runs):
        for n in ranks:
            time.sleep(PAUSE_S)
            tr_n[n].append(common.run_torchrun("trivial_ddp", {}, nproc=n, env={"GLOO_SOCKET_IFNAME": "lo"})[0])
        print("torchrun: " + ", ".join(f"n={n} {tr_n[n][-1]:.2f}" for n in ranks), flush=True)

    # -- payload ----------------------------------------------------------------------------------------------------
    fns: dict[float, Any] = {}
    pack_s: dict[float, float] = {}
    payload_bytes: dict[float, int] = {}
    for mb in sizes:
        blob = torch.randn(max(1, int(mb * (1 << 20)) // 4))
        fns[mb] = functools.partial(jobs.with_payload, blob)
        dt, data = common.timed(lambda: pack(fns[mb], (), {}, max_bytes=1 << 31))
        pack_s[mb], payload_bytes[mb] = dt, len(data)
        del data
    by_p: dict[float, list[float]] = {mb: [] for mb in sizes}
    ph_p: dict[float, list[dict[str, float]]] = {mb: [] for mb in sizes}
    first_p: dict[float, float] = {}
    for mb in sizes:
        time.sleep(PAUSE_S)
        first_p[mb], _ = ours(fns[mb], 2)
    for r in range(args.runs):
        for mb in sizes[r % len(sizes):] + sizes[:r % len(sizes)]:
            time.sleep(PAUSE_S)
            dt, g = ours(fns[mb], 2)
            by_p[mb].append(dt)
            ph_p[mb].append(g)
        print(f"round {r}: " + ", ".join(f"{label(mb)} {by_p[mb][-1]:.3f}" for mb in sizes), flush=True)

    # -- tables -----------------------------------------------------------------------------------------------------
    base = common.median(by_n[2]) if 2 in by_n else common.median(by_n[ranks[0]])
    print("\n## latency vs ranks (trivial DDP job; seconds)")
    rows = []
    for n in ranks:
        med = common.median(by_n[n])
        rows.append([n, common.fmt_s(first[n]), common.fmt_s(med), common.fmt_s(min(by_n[n])),
                     common.fmt_s(max(by_n[n])), f"{med / base:.2f}",
                     common.fmt_s(common.median(tr_n[n])) if tr_n[n] else "-",
                     f"{common.median(tr_n[n]) / med:.0f}x" if tr_n[n] else "-"])
    print(common.table(["ranks", "first s", "median s", "min s", "max s", "vs n=2", "torchrun s", "torchrun / ours"],
                       rows))
    names = [g[0] for g in phases.GROUPS]
    gm_n = {n: phases.median_groups(ph_n[n]) for n in ranks}
    print("\nphases vs ranks (ms, medians):")
    print(common.table(["phase"] + [f"n={n}" for n in ranks],
                       [[g] + [f"{1000 * gm_n[n].get(g, float('nan')):.0f}" for n in ranks] for g in names]))

    print("\n## latency vs captured payload (n=2; seconds)")
    rows = []
    base_p = common.median(by_p[sizes[0]])
    for mb in sizes:
        med = common.median(by_p[mb])
        rows.append([label(mb), f"{payload_bytes[mb]:,}", f"{1000 * pack_s[mb]:.1f}", common.fmt_s(first_p[mb]),
                     common.fmt_s(med), common.fmt_s(min(by_p[mb])), common.fmt_s(max(by_p[mb])),
                     f"+{med - base_p:.3f}"])
    print(common.table(["payload", "pickled bytes", "pack ms", "first s", "median s", "min s", "max s",
                        "vs smallest"], rows))
    gm_p = {mb: phases.median_groups(ph_p[mb]) for mb in sizes}
    print("\nphases vs payload (ms, medians):")
    print(common.table(["phase"] + [label(mb) for mb in sizes],
                       [[g] + [f"{1000 * gm_p[mb].get(g, float('nan')):.0f}" for mb in sizes] for g in names]))

    kv: dict[str, Any] = {f"n{n}_s": common.median(by_n[n]) for n in ranks}
    if 8 in by_n and 2 in by_n:
        kv["n8_over_n2"] = common.median(by_n[8]) / common.median(by_n[2])
    if 1 in by_n and 8 in by_n:
        kv["per_extra_rank_ms"] = 1000 * (common.median(by_n[8]) - common.median(by_n[1])) / 7
    for mb in sizes:
        kv[f"payload_{label(mb)}_s"] = common.median(by_p[mb])
    if len(sizes) > 1:
        big, small = sizes[-1], sizes[0]
        kv["ms_per_payload_mb"] = 1000 * (common.median(by_p[big]) - common.median(by_p[small])) / (big - small)
    total = time.perf_counter() - started
    common.save("bench_scaling", {"machine": info, "session_s": session_s, "warmup_s": warm_s, "ranks": ranks,
                                  "first": first, "by_n": by_n, "phases_n": gm_n, "torchrun_n": tr_n,
                                  "sizes_mb": sizes, "payload_bytes": payload_bytes, "pack_s": pack_s,
                                  "first_p": first_p, "by_p": {label(k): v for k, v in by_p.items()},
                                  "phases_p": {label(k): v for k, v in gm_p.items()}, "kv": kv, "total_s": total})
    print(f"# total {total:.0f} s")
    print(common.kv_line(kv))


def label(mb: float) -> str:
    return f"{mb * 1024:.0f}KB" if mb < 1 else f"{mb:.0f}MB"


if __name__ == "__main__":
    main()
