"""Where a run's time goes: per-phase timestamps across the kernel, the JVM, the Spark task, the agent
and the rank, for the trivial 2-rank job (first run after warm-up, then reruns).

    python benchmarks/profile_phases.py [--runs 6] [--n 2] [--cprofile] [--no-probe]

No package edit: hooks are installed in this process (the supervisor's event handler, the
launcher's prepare/start, the Spark job thread), Spark's status store gives the JVM's times, and
``probe.instrumented_rank_task`` (swapped in for ``launchers.spark._rank_task`` in this process
only) stamps the worker, the agent and the forked rank. All clocks are this machine's ``time.time()``.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common
import phases
import probe

jobs = common.register_jobs()
common.register_by_value(probe)


def stamped_job() -> dict[str, Any]:
    t0 = time.time()
    value = jobs.trivial_ddp()
    return dict(value, fn_start=t0, fn_end=time.time(), worker=os.getppid())


def python_workers() -> set[int]:
    """Spark's Python workers: the children of our daemon process (jupyter_torchdist._daemon)."""
    daemons, parents = set(), {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        parents[int(entry)] = ppid
        if b"jupyter_torchdist._daemon" in cmd:
            daemons.add(int(entry))
    return {pid for pid, ppid in parents.items() if ppid in daemons}


# (label, from, to): "last:" = the latest of that mark over ranks, "r0:" = rank 0's
PHASES = [
    ("kernel: call -> launcher prepared (session, slots, conf checks)", "kernel:call", "kernel:prepared"),
    ("kernel: prepared -> Spark job thread begins", "kernel:prepared", "jobthread:begin"),
    ("pyspark: job thread -> JVM job submitted (RDD, command pickle, py4j)", "jobthread:begin", "jvm:job_submitted"),
    ("JVM: job submitted -> last task launched", "jvm:job_submitted", "jvm:last_task_launch"),
    ("worker: task launched -> task function entered (command unpickled)", "jvm:last_task_launch", "last:task:entry"),
    ("agent: task entry -> rank forked (preload + fork)", "last:task:entry", "last:agent.fork:end"),
    ("rank: forked -> connected to kernel", "last:agent.fork:end", "last:rank.connect:end"),
    ("rank: connected -> rendezvous done (TCPStore, hello, all ranks in)", "last:rank.connect:end",
     "last:rank.rendezvous:end"),
    ("rank: rendezvous -> init_process_group starts (env, capture, tqdm)", "last:rank.rendezvous:end",
     "last:rank.init_group:start"),
    ("rank: init_process_group (gloo)", "last:rank.init_group:start", "last:rank.init_group:end"),
    ("rank 0: group up -> cell starts (unpack payload)", "r0:rank.init_group:end", "fn_start"),
    ("rank 0: the cell itself (DDP, 10 steps)", "fn_start", "fn_end"),
    ("rank 0: cell end -> result sent (pickle value, flush)", "fn_end", "r0:rank.finish:end"),
    ("rank: result sent -> process gone (released, os._exit, seen by its agent)", "last:rank.finish:end",
     "last:agent.wait:end"),
    ("agent: rank gone -> exit reported to the kernel", "last:agent.wait:end", "last:agent:exit"),
    ("kernel: last exit report -> value returned (the run ends here)", "last:agent:exit", "kernel:returned"),
    ("after the value: Spark task and job end (JVM)", "last:task:done", "jvm:job_completed"),
    ("TOTAL call -> value returned", "kernel:call", "kernel:returned"),
]
GROUPS = {  # indexes into PHASES; a run ends when every rank returned and its process is gone, before Spark's job
    "kernel (prepare, submit, return)": [0, 1, 15],
    "pyspark+JVM scheduling (submit -> task entry)": [2, 3, 4],
    "rank start (fork, connect, rendezvous, group)": [5, 6, 7, 8, 9, 10],
    "the cell": [11],
    "rank end (result, exit, exit report)": [12, 13, 14],
}


def run_once(jtd: Any, spark: Any, n: int, profile_job: bool = False) -> tuple[dict[str, float], dict[str, float], Any]:
    before = python_workers()
    with phases.record(spark, profile_job=profile_job) as rec:
        value = jtd.run(stamped_job, n=n)
    time.sleep(0.05)  # the last probe lines (task:done) land just after the job ended
    marks = dict(rec.marks)
    for pm in probe.read_marks(rec.run_id):
        name, at = pm["mark"], pm["at"]
        marks.setdefault(f"r{pm['rank']}:{name}", at)
        marks[f"last:{name}"] = max(marks.get(f"last:{name}", at), at)
    marks["fn_start"], marks["fn_end"] = value["fn_start"], value["fn_end"]
    table = {label: marks[b] - marks[a] for label, a, b in PHASES if a in marks and b in marks}
    info = {"reused_worker": value["worker"] in before, "idle_workers_before": len(before)}
    return marks, table, (info, rec.job_profile)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--cprofile", action="store_true", help="cProfile the kernel thread and the job thread of a rerun")
    ap.add_argument("--no-probe", action="store_true", help="leave the Spark task function untouched")
    ap.add_argument("--quiet", action="store_true", help="only the phase table")
    return ap.parse_args()


def set_up(no_probe: bool) -> tuple[Any, Any, float]:
    """Hooks (and the probe unless ``no_probe``), then the warm-up: (jupyter_torchdist, spark, warm-up s)."""
    import jupyter_torchdist as jtd
    from jupyter_torchdist.launchers import spark as spark_launcher
    from jupyter_torchdist.launchers.session import embedded as backend

    phases.install()
    if not no_probe:
        probe.use_in_kernel(spark_launcher)
    t0 = time.perf_counter()
    backend.warm_up_async().join()
    warm = time.perf_counter() - t0
    print(f"warm-up (session + daemon + workers): {warm:.2f} s", flush=True)
    spark, _ = backend.get_session()
    return jtd, spark, warm


def print_run(i: int, marks: dict[str, float], run_phases: dict[str, float], winfo: dict[str, Any]) -> None:
    """One run's total and every mark, in ms from the call."""
    total = run_phases.get("TOTAL call -> value returned", 0)
    print(f"\n## run {i} ({'first' if i == 0 else 'rerun'}): {total:.3f} s"
          f"  (idle Python workers before: {winfo['idle_workers_before']}; rank 0 forked from "
          f"{'a reused' if winfo['reused_worker'] else 'a NEW'} worker)")
    base = marks["kernel:call"]
    for name, at in sorted(marks.items(), key=lambda kv: kv[1]):
        if name.startswith("last:") or name == "kernel:prepare":
            continue
        print(f"  {1000 * (at - base):8.1f} ms  {name}")


def print_phases(all_phases: list[dict[str, float]], n: int, runs: int) -> None:
    """Each phase, then each group of phases: the first run and the median of the reruns."""
    print(f"\n## phases of the trivial {n}-rank run (ms): first run after warm-up, median of "
          f"{runs - 1} reruns")
    rows = []
    for label, _, _ in PHASES:
        first = all_phases[0].get(label)
        reruns = [p[label] for p in all_phases[1:] if label in p]
        rows.append([label, "-" if first is None else f"{1000 * first:.1f}",
                     "-" if not reruns else f"{1000 * common.median(reruns):.1f}"])
    print(common.table(["phase", "first", "rerun median"], rows))
    grows = []
    for gname, idxs in GROUPS.items():
        labels = [PHASES[i][0] for i in idxs]
        first = sum(all_phases[0].get(lb, 0.0) for lb in labels)
        rer = common.median([sum(p.get(lb, 0.0) for lb in labels) for p in all_phases[1:]]) if runs > 1 else 0
        grows.append([gname, f"{1000 * first:.0f}", f"{1000 * rer:.0f}"])
    print("\n" + common.table(["group", "first (ms)", "rerun median (ms)"], grows))


def print_cprofile(jtd: Any, spark: Any, n: int) -> None:
    """cProfile one more rerun: the kernel thread and the Spark job thread."""
    prof = cProfile.Profile()
    prof.enable()
    _, _, (_, job_prof) = run_once(jtd, spark, n, profile_job=True)
    prof.disable()
    for title, p in (("kernel thread", prof), ("Spark job thread", job_prof)):
        s = io.StringIO()
        pstats.Stats(p, stream=s).sort_stats("cumulative").print_stats(25)
        print(f"\n## cProfile of one rerun: {title}\n" + s.getvalue())


def main() -> None:
    args = parse_args()
    info = common.machine()
    common.header("profile_phases: where the time of one run goes", info)
    jtd, spark, warm = set_up(args.no_probe)
    all_phases: list[dict[str, float]] = []
    for i in range(args.runs):
        marks, run_phases, (winfo, _) = run_once(jtd, spark, args.n)
        all_phases.append(run_phases)
        if not args.quiet:
            print_run(i, marks, run_phases, winfo)
    print_phases(all_phases, args.n, args.runs)
    if args.cprofile:
        print_cprofile(jtd, spark, args.n)
    common.save("profile_phases", {"machine": info, "warmup_s": warm, "n": args.n, "phases": all_phases})
    totals = [p.get("TOTAL call -> value returned", float("nan")) for p in all_phases]
    print(common.kv_line({"first_s": totals[0],
                          "rerun_s": common.median(totals[1:]) if args.runs > 1 else float("nan"),
                          "warmup_s": warm}))


if __name__ == "__main__":
    main()
