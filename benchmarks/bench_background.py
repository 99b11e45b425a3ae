"""Issue 34: the notebook stays yours while ranks train (background runs, several at once, sweeps).

    python benchmarks/bench_background.py [--cells 40] [--steps 120] [--sweep-steps 40]

1. In a real kernel (the embedded session, warmed up as %load_ext does): a trivial cell's round trip (execute
   request to idle) while four 2-rank background runs, each with its live view, report every 50 ms, against the
   same cell in the idle kernel and against a foreground run (where the cell waits for the run's end, as it did
   before background runs).
2. The live view's traffic (widget messages on iopub, bytes per second per run) of one background run alone, and
   of each of four at once, same cell.
3. A sweep's scheduling: six 2-rank runs of fixed length (sleep-based steps) on a local[4] session (4 task slots:
   two runs at a time), against three times one run's own time alone (the ideal for three rounds).

Targets: round-trip p95 <= 50 ms with four runs training; four runs' traffic per run within the single run's;
the sweep within 1.1x the ideal.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import random
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common

TRAIN = ("%%distribute -n 2 --background -q\n" "import time\nimport jupyter_torchdist as jt\n"
         "for i in range({steps}):\n    time.sleep(0.05)\n    jt.report(step=i + 1, total={steps}, loss=1 / (i + 1))\n"
         "'done'")
VIEWED = TRAIN.replace(" -q\n", "\n")
WAIT_ALL = "import jupyter_torchdist as jt\nfor r in jt.runs():\n    r.wait()\nprint([r.state for r in jt.runs()][-4:])"


def parse_args() -> argparse.Namespace:
    ap = common.parser(__doc__)
    ap.add_argument("--cells", type=int, default=40, help="trivial cells timed per condition")
    ap.add_argument("--steps", type=int, default=120, help="steps of each background run (0.05 s each)")
    ap.add_argument("--sweep-steps", type=int, default=40, help="steps of each sweep run (0.1 s each)")
    return ap.parse_args()


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")


def _trivial_cells(ks: common.KernelSession, count: int) -> list[float]:
    out = []
    for _ in range(count):
        time.sleep(random.uniform(0.02, 0.08))
        out.append(ks.run("1 + 1")["seconds"])
    return out


def _comm_bytes(ks: common.KernelSession, seconds: float) -> dict[str, int]:
    """Bytes of widget messages (comm_msg) per comm on iopub over ``seconds``, whatever cell they belong to."""
    out: dict[str, int] = {}
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        try:
            msg = ks.kc.get_iopub_msg(timeout=0.2)
        except queue.Empty:
            continue
        if msg["msg_type"] == "comm_msg":
            comm = msg["content"]["comm_id"]
            out[comm] = out.get(comm, 0) + len(json.dumps(msg["content"], default=str))
    return out


def in_kernel(args: argparse.Namespace) -> dict[str, Any]:
    ks = common.KernelSession(env={"JUPYTER_TORCHDIST_WARMUP": "1"})
    out: dict[str, Any] = {}
    try:
        ks.load_extension()
        ks.run("%%distribute -n 2\n1")  # warm workers, as after a first cell
        out["idle"] = _trivial_cells(ks, args.cells)
        for _ in range(4):
            ks.run(VIEWED.format(steps=args.steps))  # each with its live view, as a user has them
        time.sleep(3)  # all four training
        out["four_runs"] = _trivial_cells(ks, args.cells)
        ks.run(WAIT_ALL)
        out["foreground_wait"] = _foreground_wait(ks, args)
        out["traffic_one"] = _traffic(ks, args, runs=1)
        out["traffic_four"] = _traffic(ks, args, runs=4)
    finally:
        ks.close()
    return out


def _foreground_wait(ks: common.KernelSession, args: argparse.Namespace) -> float:
    """Before background runs: the trivial cell sent 1 s into a foreground run answers only after the run."""
    started = time.perf_counter()
    msg_id = ks.kc.execute(TRAIN.format(steps=args.steps).replace(" --background", ""))
    time.sleep(1.0)
    sent = time.perf_counter()
    ks.run("1 + 1")
    del msg_id, started
    return time.perf_counter() - sent


def _traffic(ks: common.KernelSession, args: argparse.Namespace, runs: int) -> list[float]:
    """Each run's widget bytes per second while ``runs`` viewed runs train at once."""
    for _ in range(runs):
        ks.kc.execute(VIEWED.format(steps=args.steps))
    time.sleep(3)
    window = min(4.0, args.steps * 0.05 - 4)
    per_comm = _comm_bytes(ks, window)
    ks.run(WAIT_ALL)
    return sorted((b / window for b in per_comm.values()), reverse=True)[:runs]


def sweep_scheduling(args: argparse.Namespace) -> dict[str, float]:
    """Six runs on four slots (two at a time) against three times one run alone, on a local[4] session."""
    from pyspark.sql import SparkSession

    import jupyter_torchdist as jt

    spark = SparkSession.builder.master("local[4]").config("spark.pyspark.python", sys.executable).getOrCreate()
    steps = args.sweep_steps
    common.register_by_value(sys.modules[__name__])
    jt.run(_fixed, 2, n=4)  # four warm Python workers: two runs at once start as warm as one alone
    alone = [common.timed(lambda: jt.run(_fixed, steps, n=2))[0] for _ in range(3)]
    t0 = time.perf_counter()
    s = jt.sweep(_fixed, {"seed": list(range(6))}, steps, n=2)
    s.wait()
    took = time.perf_counter() - t0
    assert all(r.state == "done" for r in s.runs), [r.state for r in s.runs]
    spark.stop()
    return {"alone_s": common.median(alone), "sweep_s": took, "concurrent": float(s.concurrent or 0),
            "ratio": took / (3 * common.median(alone))}


def _fixed(steps: int, seed: int = 0) -> int:
    import time

    import jupyter_torchdist as jt

    for i in range(steps):
        time.sleep(0.1)
        jt.report(step=i + 1, total=steps)
    return seed


def _tables(kernel: dict[str, Any], sweep: dict[str, float]) -> None:
    p95 = {k: _percentile(kernel[k], 0.95) * 1000 for k in ("idle", "four_runs")}
    rows = [["idle kernel", f"{common.median(kernel['idle']) * 1000:.1f}", f"{p95['idle']:.1f}"],
            ["4 background runs", f"{common.median(kernel['four_runs']) * 1000:.1f}", f"{p95['four_runs']:.1f}"],
            ["a foreground run (before)", f"{kernel['foreground_wait'] * 1000:.0f}", "-"]]
    print(common.table(["trivial cell while", "median ms", "p95 ms"], rows))
    four = " ".join(f"{b / 1000:.1f}" for b in kernel["traffic_four"])
    print(common.table(["widget traffic", "KB/s per run"],
                       [["one run alone", f"{kernel['traffic_one'][0] / 1000:.1f}"], ["each of four at once", four]]))
    print(common.table(["sweep of 6 on 4 slots", "seconds"],
                       [["one run alone (median of 3)", f"{sweep['alone_s']:.2f}"],
                        ["the sweep", f"{sweep['sweep_s']:.2f}"], ["ideal (3 rounds)", f"{3 * sweep['alone_s']:.2f}"]]))


def main() -> None:
    args = parse_args()
    info = common.begin("bench_background: background runs, several at once, sweeps")
    started = time.perf_counter()
    kernel = in_kernel(args)
    sweep = sweep_scheduling(args)
    _tables(kernel, sweep)
    one = kernel["traffic_one"][0] if kernel["traffic_one"] else float("nan")
    four = max(kernel["traffic_four"]) if kernel["traffic_four"] else float("nan")
    kv = {"p95_ms_four_runs": _percentile(kernel["four_runs"], 0.95) * 1000,
          "p95_ms_idle": _percentile(kernel["idle"], 0.95) * 1000,
          "foreground_wait_s": kernel["foreground_wait"], "traffic_ratio": four / one,
          "sweep_ratio": sweep["ratio"], "sweep_concurrent": sweep["concurrent"]}
    common.check_targets(kv, [("p95_ms_four_runs", 50.0, False), ("traffic_ratio", 1.1, False),
                              ("sweep_ratio", 1.1, False)])
    common.finish("bench_background", {"machine": info, "kernel": kernel, "sweep": sweep}, started, kv)


if __name__ == "__main__":
    main()
