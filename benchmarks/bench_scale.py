"""Issue 35: how the kernel's side grows with the rank count, in a real kernel (jupyter_client), nothing short-cut.
    python benchmarks/bench_scale.py [--sim 64,256,1024,4096] [--real 8,32,128] [--spark 128] [--steps 100]

Simulated ranks (``tests/support/simulated.py``, a test double: the real channel protocol, no torch) for the large
counts, real
``--local`` gloo ranks for the small ones and real ranks as Spark barrier tasks of the embedded session
(``--spark``); every rank reports a loss each ``--every`` seconds for ``--steps`` steps
and logs a line every 10 steps. For each N, one ``%%distribute -n N`` cell in a fresh kernel:
- widget traffic: bytes of widget messages on iopub per second of the run (what the browser receives);
- saved report: bytes of the report bundle the cell leaves (what the notebook file keeps);
- kernel CPU: the kernel process's CPU seconds over the run, as a share of one core;
- kernel memory: the kernel's resident memory after the run less before, per rank;
- start: seconds from the cell's start until every rank was running (the kernel's own clock);
- failure: with rank N/2 failing a third of the way in, how long after its failure (the rank's clock) the live view
  named it as the root cause (the first widget message whose error is that rank's), and when the cell ended;
- interrupt: a long run interrupted once every rank runs: seconds from the kernel's interrupt to the cell's end.
Targets (the issue's): widget traffic <= 150 KB/s, report <= 300 KB at every N; kernel CPU <= 30 % of a core and
start <= 5 s at 1,024 simulated ranks; the failure named within 1 s; an interrupt ends the run within 5 s; <= 1 MB
of kernel memory per rank.
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
REAL_CELL = ("%%distribute -n {n}{flags}\nimport time, jupyter_torchdist as jt\n"
             "for step in range({steps}):\n    jt.report(step=step + 1, total={steps}, loss=1.0 / (step + 1))\n"
             "    if step % 10 == 9:\n        print('step', step + 1)\n    time.sleep({every})\n1")
TARGET_N = 1024  # the CPU, start, failure and interrupt targets are the at 1,024 simulated ranks
SIM_CELL = "%%distribute -n {n}\n1"
TIMES = ("import jupyter_torchdist as jt, json\nr = jt.last_run()\n"
         "s = r.state\nstarted = [x.started_at for x in s.ranks if x.started_at is not None]\n"
         "failed = [f.at for f in s.failures.values() if not f.secondary]\n"
         "print('TIMES', json.dumps({'start': max(started) - s.started_at if len(started) == len(s.ranks) else None,"
         " 'failed_at': min(failed) if failed else None}))")


def parse_args() -> argparse.Namespace:
    ap = common.parser(__doc__)
    ap.add_argument("--sim", default="64,256,1024,4096")
    ap.add_argument("--real", default="8,32,128")
    ap.add_argument("--spark", default="128", help="real ranks as Spark barrier tasks of the embedded session")
    ap.add_argument("--sim-spark", default="1024x256",
                    help="simulated ranks inside Spark barrier tasks of the embedded session, RANKSxTASKS (the Spark "
                         "launcher's path at scale), each measured running and interrupted")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--every", type=float, default=0.1)
    return ap.parse_args()


def _named(content: dict[str, Any]) -> bool:
    """Whether a widget message shows a run's root cause."""
    snapshot = content.get("data", {}).get("state", {}).get("snapshot")
    return isinstance(snapshot, dict) and isinstance(snapshot.get("error"), dict)


def _all_running(content: dict[str, Any]) -> bool:
    """Whether a widget message shows every rank of a many-rank run running."""
    snapshot = content.get("data", {}).get("state", {}).get("snapshot")
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("summary"), dict):
        return False
    return bool(snapshot["summary"]["counts"].get("running") == snapshot.get("world_size"))


class _Watch:
    """What one cell's iopub messages say: widget bytes, the report's size, its text and error, when the view first
    named a root cause and when every rank ran; with ``interrupt_s``, it interrupts the kernel that long after."""

    def __init__(self, ks: common.KernelSession, msg_id: str, interrupt_s: float | None) -> None:
        self.ks, self.msg_id, self.interrupt_s = ks, msg_id, interrupt_s
        self.widget = self.report = 0
        self.text: list[str] = []
        self.error: str | None = None
        self.named_at: float | None = None
        self.running_at: float | None = None
        self.interrupted_at: float | None = None

    def see(self, msg: dict[str, Any]) -> bool:
        """Take one message; True once the cell is done."""
        kind, content = msg["msg_type"], msg["content"]
        if kind == "comm_msg":
            self.widget += len(json.dumps(content, default=str))
            self.named_at = self.named_at or (time.time() if _named(content) else None)
            self.running_at = self.running_at or (time.perf_counter() if _all_running(content) else None)
        if self.interrupt_s is not None and self.interrupted_at is None and self.running_at is not None \
                and time.perf_counter() - self.running_at >= self.interrupt_s:
            self.ks.km.interrupt_kernel()
            self.interrupted_at = time.perf_counter()
        if msg["parent_header"].get("msg_id") != self.msg_id:
            return False
        if kind in ("display_data", "update_display_data") and REPORT_MIME in content.get("data", {}):
            self.report = len(json.dumps(content["data"], default=str))
        elif kind == "stream":
            self.text.append(content["text"])
        elif kind == "error":
            self.error = content["ename"] + ": " + content["evalue"]
        return kind == "status" and content["execution_state"] == "idle"


def _cell(ks: common.KernelSession, code: str, timeout: float = 600, interrupt_s: float | None = None
          ) -> dict[str, Any]:
    """Run a cell and watch it (``_Watch``)."""
    t0 = time.perf_counter()
    watch = _Watch(ks, ks.kc.execute(code), interrupt_s)
    while True:
        try:
            if watch.see(ks.kc.get_iopub_msg(timeout=1)):
                break
        except queue.Empty:
            if time.perf_counter() - t0 > timeout:
                raise TimeoutError(code[:60]) from None
    ended = time.perf_counter()
    return {"seconds": ended - t0, "widget": watch.widget, "report": watch.report, "text": "".join(watch.text),
            "error": watch.error, "named_at": watch.named_at,
            "interrupt_s": None if watch.interrupted_at is None else ended - watch.interrupted_at}


def _fail_at(args: argparse.Namespace) -> float:
    return round(args.steps * args.every / 3, 2)


def one(n: int, simulated: bool, args: argparse.Namespace, fail: bool = False, interrupt: bool = False,
        spark: bool = False, tasks: int = 0) -> dict[str, Any]:
    """One row: ``n`` ranks, simulated or real (``--local`` processes, or Spark barrier tasks of the embedded session
    with ``spark``, whose session is started and warmed by a first small run before the measured one); simulated
    ranks inside ``tasks`` Spark barrier tasks with ``tasks`` (and ``spark``)."""
    import psutil

    steps = args.steps * 10 if interrupt else args.steps
    spec = f"steps={steps},every={args.every},log_every=10,hosts={max(1, n // 8)}"
    if tasks:
        spec += f",tasks={tasks}"
    if fail:
        spec += f",fail_rank={n // 2},fail_at={_fail_at(args)}"
    env = {"JUPYTER_TORCHDIST_WARMUP": "0", **({"JUPYTER_TORCHDIST_SIMULATE": spec} if simulated else {})}
    ks = common.KernelSession(env=env)
    try:
        ks.run("%load_ext jupyter_torchdist")
        if simulated:  # the package never registers simulated ranks: the benchmark does
            ks.run(f"import sys\nsys.path.insert(0, {str(common.REPO)!r})\n"
                   "from tests.support import simulated\nsimulated.enable()")
        if spark:
            ks.run("%%distribute -n 2\n1")
        kernel = psutil.Process(ks.km.provisioner.process.pid)  # type: ignore[union-attr]
        rss0, cpu0 = kernel.memory_info().rss, sum(kernel.cpu_times()[:2])
        code = (SIM_CELL if simulated else REAL_CELL).format(n=n, steps=args.steps, every=args.every,
                                                             flags="" if spark else " --local")
        out = _cell(ks, code, interrupt_s=3.0 if interrupt else None)
        cpu = sum(kernel.cpu_times()[:2]) - cpu0
        rss = kernel.memory_info().rss - rss0
        start, failed_at = _times(ks)
        named = None if out["named_at"] is None or failed_at is None else out["named_at"] - failed_at
        kind = (f"simulated, in {tasks} Spark tasks" if tasks else "simulated" if simulated
                else "real, Spark tasks" if spark else "real --local")
        return {"n": n, "simulated": simulated, "kind": kind, "seconds": out["seconds"],
                "widget_kbs": out["widget"] / 1000 / out["seconds"], "report_kb": out["report"] / 1000,
                "cpu_share": cpu / out["seconds"],
                "mb_per_rank": rss / n / 2**20, "start_s": start, "error": out["error"], "named_s": named,
                "interrupt_s": out["interrupt_s"]}
    finally:
        ks.close()


def _times(ks: common.KernelSession) -> tuple[float | None, float | None]:
    """(seconds until every rank ran, when the root failure happened) of the kernel's last run."""
    ks.kc.execute(TIMES)
    while True:
        msg = ks.kc.get_iopub_msg(timeout=30)
        if msg["msg_type"] == "stream" and "TIMES" in msg["content"]["text"]:
            said = json.loads(msg["content"]["text"].split("TIMES", 1)[1])
            return said["start"], said["failed_at"]


def _report(rows: list[dict[str, Any]], fails: list[dict[str, Any]], stops: list[dict[str, Any]],
            args: argparse.Namespace) -> None:
    """Print the table of rows, then what each failure and interrupt measured."""
    print(common.table(
        ["ranks", "kind", "run s", "widget KB/s", "report KB", "kernel CPU (cores)", "kernel MB/rank", "start s",
         "outcome"],
        [[r["n"], r["kind"], f"{r['seconds']:.1f}", f"{r['widget_kbs']:.0f}",
          f"{r['report_kb']:.0f}", f"{r['cpu_share']:.2f}", f"{r['mb_per_rank']:.2f}",
          "-" if r["start_s"] is None else f"{r['start_s']:.1f}", (r["error"] or "ok")[:70]] for r in rows]))
    for f in fails:
        after = f["seconds"] - (f["start_s"] or 0.0) - _fail_at(args)
        named = "never" if f["named_s"] is None else f"{f['named_s']:.2f} s"
        print(f"{f['n']} simulated ranks, rank {f['n'] // 2} failing {_fail_at(args)} s into its loop: the view named "
              f"it {named} after the failure; the cell ended about {after:.1f} s after it, with {f['error']!r}")
    for s in stops:
        print(f"{s['n']} {s['kind']} ranks interrupted 3 s after they all ran: the cell ended "
              f"{s['interrupt_s']:.2f} s after the interrupt, with {s['error']!r}")


def main() -> None:
    args = parse_args()
    info = common.begin("bench_scale: the kernel's side as the rank count grows")
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for n in [int(x) for x in args.real.split(",") if x]:
        rows.append(one(n, False, args))
    for n in [int(x) for x in args.spark.split(",") if x]:
        rows.append(one(n, False, args, spark=True))
    for n in [int(x) for x in args.sim.split(",") if x]:
        rows.append(one(n, True, args))
    in_tasks = [tuple(int(v) for v in x.split("x")) for x in args.sim_spark.split(",") if x]
    for n, tasks in in_tasks:
        rows.append(one(n, True, args, spark=True, tasks=tasks))
    largest = [n for n in (int(x) for x in args.sim.split(",") if x) if n <= TARGET_N][-1:]
    fails = [one(n, True, args, fail=True) for n in largest]
    stops = [one(n, True, args, interrupt=True) for n in largest]
    stops += [one(n, True, args, interrupt=True, spark=True, tasks=tasks) for n, tasks in in_tasks]
    _report(rows, fails, stops, args)
    biggest = max((r for r in rows if r["n"] <= TARGET_N), key=lambda r: (r["kind"] == "simulated", r["n"]))
    nan = float("nan")
    kv = {"widget_kbs_max": max(r["widget_kbs"] for r in rows), "report_kb_max": max(r["report_kb"] for r in rows),
          "cpu_share_largest": biggest["cpu_share"], "start_s_largest": biggest["start_s"] or nan,
          "mb_per_rank_largest": biggest["mb_per_rank"],
          "named_s_largest": max((f["named_s"] if f["named_s"] is not None else nan) for f in fails) if fails else nan,
          "interrupt_s_largest": max((s["interrupt_s"] or nan) for s in stops) if stops else nan}
    common.check_targets(kv, [("widget_kbs_max", 150.0, False), ("report_kb_max", 300.0, False),
                              ("cpu_share_largest", 0.30, False), ("start_s_largest", 5.0, False),
                              ("mb_per_rank_largest", 1.0, False), ("named_s_largest", 1.0, False),
                              ("interrupt_s_largest", 5.0, False)])
    common.finish("bench_scale", {"machine": info, "rows": rows, "failures": fails, "interrupts": stops}, started, kv)


if __name__ == "__main__":
    main()
