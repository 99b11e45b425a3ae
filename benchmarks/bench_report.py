"""Issue #3, item 4: what ``jupyter_torchdist.report()`` and tqdm bars cost, and what reaches the front end.

    python benchmarks/bench_report.py [--rounds 3] [--steps 3000] [--flood-seconds 3]

A. Cost on the rank (2 ranks under our launcher): the same loop (a matmul per step: ``--work``
   sizes) with no reporting, with ``report(step=..., total=..., loss=...)`` every step, and with a
   tqdm bar over the steps (our rank-side bridge turns it into reports). µs per report() call is
   timed around the call inside the loop; overhead % compares the mean step time with the plain loop.
B. Never blocking: report() against a kernel that has stopped reading (a socket nobody reads, the
   package's own RankClient): per-call latency stays flat, the oldest progress is dropped instead.
C. Front end: 8 ranks, each calling report() 1,000 times a second for ``--flood-seconds``, under
   ``run_detailed(..., view=CountingView())``: how many ``view.update`` calls per second (the
   redraws a notebook gets; should stay about 10/s), and how many progress messages reached the kernel.
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common
import phases

jobs = common.register_jobs()
MODES = ["none", "report", "tqdm"]


class CountingView:
    """A RunView that only counts and timestamps its calls (the jupyter_torchdist.views.RunView protocol)."""
    log_tail = 0

    def __init__(self) -> None:
        self.starts = 0
        self.finishes = 0
        self.updates: list[float] = []

    def start(self, snapshot: dict[str, Any]) -> None:
        self.starts += 1

    def update(self, snapshot: dict[str, Any]) -> None:
        self.updates.append(time.monotonic())

    def finish(self, snapshot: dict[str, Any]) -> None:
        self.finishes += 1

    def max_per_second(self) -> int:
        best, j = 0, 0
        for i, t in enumerate(self.updates):
            while self.updates[j] < t - 1.0:
                j += 1
            best = max(best, i - j + 1)
        return best


def _drain(sock: socket.socket, stop: threading.Event) -> None:
    """A kernel that reads: take everything off ``sock`` until ``stop`` is set or the peer goes."""
    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            if not sock.recv(1 << 20):
                return
        except TimeoutError:
            continue
        except OSError:
            return


def _report_latencies(client: Any, calls: int) -> list[float]:
    """Seconds of each of ``calls`` report() calls posting through ``client``, sorted."""
    from jupyter_torchdist.rank import api as rank_api

    rank_api._sink.post = client.post_progress
    lat = []
    try:
        for step in range(calls):
            t0 = time.perf_counter()
            rank_api.report(step=step, total=calls, loss=1.0)
            lat.append(time.perf_counter() - t0)
    finally:
        rank_api._sink.post = None
    lat.sort()
    return lat


def _stall_case(calls: int, reader: bool) -> dict[str, Any]:
    """report() through RankClient over a socket pair whose other end is read (``reader``) or ignored."""
    from jupyter_torchdist.rank.client import RankClient

    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 16)
    stop = threading.Event()
    if reader:
        threading.Thread(target=_drain, args=(b, stop), daemon=True).start()
    client = RankClient(a)
    lat = _report_latencies(client, calls)
    out = {"calls": calls, "mean_us": 1e6 * sum(lat) / len(lat), "p50_us": 1e6 * lat[len(lat) // 2],
           "p99_us": 1e6 * lat[int(len(lat) * 0.99)], "max_us": 1e6 * lat[-1], "dropped": client.dropped_progress}
    stop.set()
    b.close()  # a sender blocked on the full socket gets an error and ends
    a.close()
    return out


def stalled_kernel_cost(calls: int = 200_000) -> dict[str, Any]:
    """report() through RankClient when the kernel never reads: a socket pair, one end ignored."""
    cases = (("kernel reading", True), ("kernel stalled", False))
    return {label: _stall_case(calls, reader) for label, reader in cases}


def parse_args() -> argparse.Namespace:
    ap = common.parser(__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--work", default="32,192", help="matmul sizes: a tiny step and a ~1 ms step")
    ap.add_argument("--flood-ranks", type=int, default=8)
    ap.add_argument("--flood-hz", type=float, default=1000.0)
    ap.add_argument("--flood-seconds", type=float, default=3.0)
    return ap.parse_args()


def start_session() -> Any:
    """The embedded session (it has the slots the flood needs from the start), then the warm-up."""
    from jupyter_torchdist.launchers.session import embedded as backend

    spark, _ = backend.get_session()
    warm_s = common.warm_up()
    print(f"session {spark.sparkContext.master}, warm-up {warm_s:.2f} s", flush=True)
    return spark


def measure_cost(args: argparse.Namespace, works: list[int]) -> dict[int, dict[str, list[dict[str, Any]]]]:
    """A: the loop with each reporting mode, every rank's numbers, ``--rounds`` rounds (modes rotating)."""
    import jupyter_torchdist as jtd

    cost: dict[int, dict[str, list[dict[str, Any]]]] = {w: {m: [] for m in MODES} for w in works}
    for r in range(args.rounds):
        for w in works:
            for mode in common.rotated(MODES, r):
                time.sleep(0.3)
                values = jtd.run(jobs.report_cost, mode, args.steps, w, n=2, all_ranks=True)
                cost[w][mode].extend(values)
        print(f"round {r} done", flush=True)
    return cost


def print_cost(cost: dict[int, dict[str, list[dict[str, Any]]]], works: list[int], kv: dict[str, Any]) -> None:
    """A's table: step time per mode, report() µs per call, overhead against the plain loop (into ``kv``)."""
    rows = []
    for w in works:
        base = common.median([v["step_us"] for v in cost[w]["none"]])
        for mode in MODES:
            vals = cost[w][mode]
            step = common.median([v["step_us"] for v in vals])
            per_call = common.median([v["report_us"] for v in vals]) if mode == "report" else None
            worst = max(v["report_max_us"] for v in vals) if mode == "report" else None
            over = 100 * (step - base) / base
            rows.append([w, mode, f"{step:.1f}", "-" if per_call is None else f"{per_call:.2f}",
                         "-" if worst is None else f"{worst:.0f}", f"{over:+.1f}%" if mode != "none" else "-"])
            if mode == "report":
                kv[f"report_us_w{w}"] = per_call
                kv[f"report_max_us_w{w}"] = worst
            if mode != "none":
                kv[f"{mode}_overhead_pct_w{w}"] = over
    print("\n## A. cost on the rank (2 ranks; medians over ranks and rounds)")
    print(common.table(["matmul n", "mode", "step µs", "report() µs/call", "worst call µs", "step time vs none"],
                       rows))


def print_stall(stall: dict[str, Any], kv: dict[str, Any]) -> None:
    print("\n## B. report() when the kernel stops reading (RankClient over a socket nobody reads)")
    print(common.table(["kernel", "calls", "mean µs", "p50 µs", "p99 µs", "max µs", "progress dropped"],
                       [[k, v["calls"], f"{v['mean_us']:.2f}", f"{v['p50_us']:.2f}", f"{v['p99_us']:.2f}",
                         f"{v['max_us']:.0f}", v["dropped"]] for k, v in stall.items()]))
    kv["stalled_report_mean_us"] = stall["kernel stalled"]["mean_us"]
    kv["stalled_report_p99_us"] = stall["kernel stalled"]["p99_us"]


def flood(args: argparse.Namespace, spark: Any) -> dict[str, Any]:
    """C: ``--flood-ranks`` ranks reporting at ``--flood-hz`` under a CountingView; what reached the kernel."""
    import jupyter_torchdist as jtd

    view = CountingView()
    with phases.record(spark) as rec:
        t0 = time.perf_counter()
        result = jtd.run_detailed(jobs.report_flood, args.flood_hz, args.flood_seconds, n=args.flood_ranks,
                                  all_ranks=True, view=view)
        run_s = time.perf_counter() - t0
    progress_at = [at for at, name in rec.raw if name.endswith(":progress")]
    first_prog, last_prog = min(progress_at, default=None), max(progress_at, default=None)
    return {"view": view, "run_s": run_s, "sent": sum(v["sent"] for v in result.value),
            "progress_in": sum(1 for _, name in rec.raw if name.startswith("rank") and name.endswith(":progress")),
            "dropped_msgs": sum(1 for _, name in rec.raw if name.endswith(":dropped")),
            "achieved": [v["achieved_hz"] for v in result.value],
            "worst_call": max(v["worst_report_us"] for v in result.value),
            "flood_s": (last_prog - first_prog) if first_prog and last_prog else args.flood_seconds}


def print_flood(args: argparse.Namespace, f: dict[str, Any], kv: dict[str, Any]) -> None:
    view, sent, progress_in, run_s = f["view"], f["sent"], f["progress_in"], f["run_s"]
    rate_run = len(view.updates) / run_s
    print(f"\n## C. front end with {args.flood_ranks} ranks x {args.flood_hz:.0f} report()/s for "
          f"{args.flood_seconds:.0f} s")
    print(common.table(["what", "value"], [
        ["report() calls made (all ranks)", f"{sent:,}"],
        ["achieved report rate per rank (min..max /s)", f"{min(f['achieved']):.0f}..{max(f['achieved']):.0f}"],
        ["worst report() call on any rank (µs)", f"{f['worst_call']:.0f}"],
        ["progress messages that reached the kernel", f"{progress_in:,} ({100 * progress_in / max(1, sent):.1f}%; "
                                                      f"ranks reporting drops: {f['dropped_msgs']})"],
        ["kernel-side messages/s during the flood", f"{progress_in / max(f['flood_s'], 1e-9):,.0f}"],
        [f"view.update calls (whole run, {run_s:.2f} s)", f"{len(view.updates)}"],
        ["view.update per second (whole run)", f"{rate_run:.1f}"],
        ["view.update in the busiest 1 s window", f"{view.max_per_second()}"],
        ["view.start / view.finish", f"{view.starts} / {view.finishes}"],
    ]))
    kv["view_updates_per_s"] = rate_run
    kv["view_updates_max_1s"] = view.max_per_second()
    kv["kernel_msgs_per_s"] = progress_in / max(f["flood_s"], 1e-9)


def print_targets(works: list[int], kv: dict[str, Any]) -> None:
    print()
    for w in works:
        v = kv[f"report_us_w{w}"]
        print(f"target report_us_w{w} <= 50: {v:.2f} {'MET' if v <= 50 else 'MISSED'}")
    busiest = kv["view_updates_max_1s"]
    print(f"target view_updates_max_1s ~<= 10 (bounded): {busiest} {'MET' if busiest <= 12 else 'MISSED'}")


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    info = common.begin("bench_report: cost of report() and tqdm on the rank; front-end update rate")
    spark = start_session()
    works = [int(w) for w in args.work.split(",")]
    kv: dict[str, Any] = {}
    cost = measure_cost(args, works)
    print_cost(cost, works, kv)
    stall = stalled_kernel_cost()
    print_stall(stall, kv)
    f = flood(args, spark)
    print_flood(args, f, kv)
    print_targets(works, kv)
    common.finish("bench_report", {"machine": info, "cost": cost, "stall": stall, "flood": {
        "ranks": args.flood_ranks, "hz": args.flood_hz, "seconds": args.flood_seconds, "sent": f["sent"],
        "progress_in": f["progress_in"], "updates": len(f["view"].updates), "run_s": f["run_s"],
        "max_1s": f["view"].max_per_second()}, "kv": kv}, started, kv)


if __name__ == "__main__":
    main()
