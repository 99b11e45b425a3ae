"""Issue 35: how the kernel's side grows with the rank count, in a real kernel (jupyter_client), nothing short-cut.
    python benchmarks/bench_scale.py [--sim 64,256,1024] [--real 8,32] [--steps 100] [--every 0.1]

Simulated ranks (``launchers/simulated.py``: the real channel protocol, no torch) for the large counts, real
``--local`` gloo ranks for the small ones; every rank reports a loss each ``--every`` seconds for ``--steps`` steps
and logs a line every 10 steps. For each N, one ``%%distribute -n N`` cell in a fresh kernel:
- widget traffic: bytes of widget messages on iopub per second of the run (what the browser receives);
- saved report: bytes of the report bundle the cell leaves (what the notebook file keeps);
- kernel CPU: the kernel process's CPU seconds over the run, as a share of one core;
- kernel memory: the kernel's resident memory after the run less before, per rank;
- start: seconds from the cell's start until every rank was running (the kernel's own clock);
- failure: with rank N/2 failing a third of the way in, about how long after its failure the cell ended with its
  error (the cell's seconds less the start and the failure's moment).
Targets (the issue's): widget traffic <= 150 KB/s, report <= 300 KB at every N; kernel CPU <= 30 % of a core and
start <= 5 s at 1,024 simulated ranks; the failure named within 1 s; <= 1 MB of kernel memory per rank.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

REPORT_MIME = "application/vnd.jupyter-torchdist.run+json"
REAL_CELL = ("%%distribute -n {n} --local\nimport time, jupyter_torchdist as jt\n"
             "for step in range({steps}):\n    jt.report(step=step + 1, total={steps}, loss=1.0 / (step + 1))\n"
             "    if step % 10 == 9:\n        print('step', step + 1)\n    time.sleep({every})\n1")
SIM_CELL = "%%distribute -n {n}\n1"
TIMES = ("import jupyter_torchdist as jt, json\nr = jt.last_run()\n"
         "s = r.state\nstarted = [x.started_at for x in s.ranks if x.started_at is not None]\n"
         "print('TIMES', json.dumps({'start': max(started) - s.started_at if len(started) == len(s.ranks) else None}))")


def parse_args() -> argparse.Namespace:
    ap = common.parser(__doc__)
    ap.add_argument("--sim", default="64,256,1024")
    ap.add_argument("--real", default="8,32")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--every", type=float, default=0.1)
    return ap.parse_args()


def _cell(ks: common.KernelSession, code: str, timeout: float = 600) -> dict[str, Any]:
    """Run a cell, counting widget bytes and the last report bundle's size on iopub; the cell's text too."""
    msg_id = ks.kc.execute(code)
    t0 = time.perf_counter()
    widget = report = 0
    text: list[str] = []
    error = None
    while True:
        try:
            msg = ks.kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            if time.perf_counter() - t0 > timeout:
                raise TimeoutError(code[:60]) from None
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "comm_msg":
            widget += len(json.dumps(content, default=str))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if kind in ("display_data", "update_display_data") and REPORT_MIME in content.get("data", {}):
            report = len(json.dumps(content["data"], default=str))
        elif kind == "stream":
            text.append(content["text"])
        elif kind == "error":
            error = content["ename"] + ": " + content["evalue"]
        elif kind == "status" and content["execution_state"] == "idle":
            break
    return {"seconds": time.perf_counter() - t0, "widget": widget, "report": report, "text": "".join(text),
            "error": error}


def _fail_at(args: argparse.Namespace) -> float:
    return round(args.steps * args.every / 3, 2)


def one(n: int, simulated: bool, args: argparse.Namespace, fail: bool = False) -> dict[str, Any]:
    import psutil

    spec = f"steps={args.steps},every={args.every},log_every=10,hosts={max(1, n // 8)}"
    if fail:
        spec += f",fail_rank={n // 2},fail_at={_fail_at(args)}"
    env = {"JUPYTER_TORCHDIST_WARMUP": "0", **({"JUPYTER_TORCHDIST_SIMULATE": spec} if simulated else {})}
    ks = common.KernelSession(env=env)
    try:
        ks.run("%load_ext jupyter_torchdist")
        kernel = psutil.Process(ks.km.provisioner.process.pid)  # type: ignore[union-attr]
        rss0, cpu0 = kernel.memory_info().rss, sum(kernel.cpu_times()[:2])
        code = (SIM_CELL if simulated else REAL_CELL).format(n=n, steps=args.steps, every=args.every)
        out = _cell(ks, code)
        cpu = sum(kernel.cpu_times()[:2]) - cpu0
        rss = kernel.memory_info().rss - rss0
        start = _times(ks)
        return {"n": n, "simulated": simulated, "seconds": out["seconds"], "widget_kbs": out["widget"] / 1000 /
                out["seconds"], "report_kb": out["report"] / 1000, "cpu_share": cpu / out["seconds"],
                "mb_per_rank": rss / n / 2**20, "start_s": start, "error": out["error"]}
    finally:
        ks.close()


def _times(ks: common.KernelSession) -> float | None:
    ks.kc.execute(TIMES)
    while True:
        msg = ks.kc.get_iopub_msg(timeout=30)
        if msg["msg_type"] == "stream" and "TIMES" in msg["content"]["text"]:
            value: float | None = json.loads(msg["content"]["text"].split("TIMES", 1)[1])["start"]
            return value


def main() -> None:
    args = parse_args()
    info = common.begin("bench_scale: the kernel's side as the rank count grows")
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for n in [int(x) for x in args.real.split(",") if x]:
        rows.append(one(n, False, args))
    for n in [int(x) for x in args.sim.split(",") if x]:
        rows.append(one(n, True, args))
    fails = [one(n, True, args, fail=True) for n in [int(x) for x in args.sim.split(",") if x][-1:]]
    print(common.table(
        ["ranks", "kind", "run s", "widget KB/s", "report KB", "kernel CPU (cores)", "kernel MB/rank", "start s",
         "outcome"],
        [[r["n"], "simulated" if r["simulated"] else "real --local", f"{r['seconds']:.1f}", f"{r['widget_kbs']:.0f}",
          f"{r['report_kb']:.0f}", f"{r['cpu_share']:.2f}", f"{r['mb_per_rank']:.2f}",
          "-" if r["start_s"] is None else f"{r['start_s']:.1f}", (r["error"] or "ok")[:70]] for r in rows]))
    for f in fails:
        after = f["seconds"] - (f["start_s"] or 0.0) - _fail_at(args)
        print(f"{f['n']} simulated ranks, rank {f['n'] // 2} failing {_fail_at(args)} s into its loop: the cell ended "
              f"about {after:.1f} s after the failure, with {f['error']!r}")
    biggest = rows[-1]
    kv = {"widget_kbs_max": max(r["widget_kbs"] for r in rows), "report_kb_max": max(r["report_kb"] for r in rows),
          "cpu_share_largest": biggest["cpu_share"], "start_s_largest": biggest["start_s"] or float("nan"),
          "mb_per_rank_largest": biggest["mb_per_rank"]}
    common.check_targets(kv, [("widget_kbs_max", 150.0, False), ("report_kb_max", 300.0, False),
                              ("cpu_share_largest", 0.30, False), ("start_s_largest", 5.0, False),
                              ("mb_per_rank_largest", 1.0, False)])
    common.finish("bench_scale", {"machine": info, "rows": rows, "failures": fails}, started, kv)


if __name__ == "__main__":
    main()
