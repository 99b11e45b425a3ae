"""Issue #3, item 1: launch latency of the trivial 2-rank DDP job, cell start to value back.

    python benchmarks/bench_latency.py [--runs 5] [--no-td] [--no-accelerate]

Side by side, in one run, in one process, on this machine and one local SparkSession (our embedded
one, local[4], which TorchDistributor finds as the active session):
  * ours, Python API (``jupyter_torchdist.run``): the warm-up (``warm_up_async().join()``, what
    ``%load_ext`` starts), the first run after it, and reruns (each with its per-phase times);
  * pyspark's TorchDistributor(num_processes=2, use_gpu=False), local_mode True and False;
  * ``torchrun --nproc_per_node 2`` of benchmarks/ddp_script.py (a subprocess, as from a notebook);
  * Accelerate's ``notebook_launcher(num_processes=2)`` if accelerate imports.
The reruns and competitors go round-robin (the order rotates each round), so drifting load hits
every launcher alike. The magic's own path (a real kernel, ``%load_ext`` then ``%%distribute``) is
bench_magic.py. Prints a table, then one ``key=value`` line of ratios.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import phases  # noqa: E402

jobs = common.register_jobs()

LOG = os.path.join(common.RESULTS, "bench_latency.launchers.log")
SHORT = {"ours rerun (API)": "ours", "TorchDistributor local_mode=True": "TD(local)",
         "TorchDistributor local_mode=False": "TD(dist)", "torchrun --nproc_per_node 2": "torchrun",
         "accelerate notebook_launcher": "accelerate"}
PAUSE_S = 0.5  # between measurements: let the last run's processes go away


def td(local_mode: bool) -> Callable[[], Any]:
    def call() -> Any:
        from pyspark.ml.torch.distributor import TorchDistributor

        with common.fd_silenced(LOG):
            return TorchDistributor(num_processes=2, local_mode=local_mode, use_gpu=False).run(jobs.trivial_ddp)
    return call


def torchrun() -> Any:
    _, values = common.run_torchrun("trivial_ddp", {}, nproc=2, env={"GLOO_SOCKET_IFNAME": "lo"})
    return values[0]


def accelerate_call() -> Any:
    from accelerate import notebook_launcher

    with common.fd_silenced(LOG):
        notebook_launcher(jobs.trivial_ddp, args=(), num_processes=2, use_port=str(common.free_port()))
    return None  # notebook_launcher returns nothing: the value stays in the ranks


def accelerate_status() -> str | None:
    """None if usable, else why not."""
    try:
        import accelerate  # noqa: F401
        from accelerate import notebook_launcher  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return f"accelerate does not import: {type(exc).__name__}: {exc}"
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="reruns / competitor runs (medians of these)")
    ap.add_argument("--no-td", action="store_true")
    ap.add_argument("--no-accelerate", action="store_true")
    args = ap.parse_args()
    started = time.perf_counter()
    common.wait_for_quiet()
    info = common.machine()
    common.header("bench_latency: trivial 2-rank DDP job (Linear(10,1), 10 steps, gloo), cell start to value back",
                  info)
    if os.path.exists(LOG):
        os.unlink(LOG)

    import jupyter_torchdist as jtd
    from jupyter_torchdist.launchers import spark as backend

    # -- ours, Python API: warm-up, first run --------------------------------------------------------------------
    warm_s, _ = common.timed(lambda: backend.warm_up_async().join())
    spark, _ = backend.get_session(2)
    print(f"ours: warm-up {warm_s:.2f} s on {spark.sparkContext.master}", flush=True)
    time.sleep(PAUSE_S)
    with phases.record(spark) as rec:
        first_s, first_v = common.timed(lambda: jtd.run(jobs.trivial_ddp, n=2))
    first_phases = rec.groups()
    print(f"ours: first run after warm-up {first_s:.3f} s (cell in rank {first_v['fn_s']:.3f} s)", flush=True)

    # -- round-robin: our reruns and every competitor --------------------------------------------------------------
    ours_phases: list[dict[str, float]] = []
    inner: dict[str, float] = {}

    def ours() -> Any:
        with phases.record(spark) as rec:  # the JVM's marks are read after the run, outside the time
            t0 = time.perf_counter()
            value = jtd.run(jobs.trivial_ddp, n=2)
            inner["s"] = time.perf_counter() - t0
        ours_phases.append(rec.groups())
        return value

    launchers: dict[str, Callable[[], Any]] = {"ours rerun (API)": ours}
    skipped: dict[str, str] = {}
    if not args.no_td:
        launchers["TorchDistributor local_mode=True"] = td(True)
        launchers["TorchDistributor local_mode=False"] = td(False)
    launchers["torchrun --nproc_per_node 2"] = torchrun
    why = "skipped (--no-accelerate)" if args.no_accelerate else accelerate_status()
    if why is None:
        launchers["accelerate notebook_launcher"] = accelerate_call
    else:
        skipped["accelerate notebook_launcher"] = why
    times: dict[str, list[float]] = {k: [] for k in launchers}
    fn_times: dict[str, list[float]] = {k: [] for k in launchers}
    names = list(launchers)
    for r in range(args.runs):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            time.sleep(PAUSE_S)
            try:
                dt, value = common.timed(launchers[name])
                dt = inner.pop("s", dt)
            except Exception as exc:  # noqa: BLE001 - a competitor failing is a result, not a crash
                skipped[name] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                traceback.print_exc()
                continue
            times[name].append(dt)
            if isinstance(value, dict) and "fn_s" in value:
                fn_times[name].append(value["fn_s"])
        print(f"round {r}: " + ", ".join(f"{SHORT[n]} {times[n][-1]:.2f}" for n in order if times[n]),
              flush=True)

    # -- table ---------------------------------------------------------------------------------------------------
    ours_rerun = common.median(times["ours rerun (API)"])
    rows: list[list[Any]] = []

    def row(name: str, xs: list[float], fns: list[float] | None = None, note: str = "") -> None:
        med = common.median(xs)
        rows.append([name, len(xs), common.fmt_s(med), common.fmt_s(min(xs) if xs else None),
                     common.fmt_s(max(xs) if xs else None),
                     common.fmt_s(common.median(fns)) if fns else "-",
                     f"{med / ours_rerun:.1f}x" if xs else "-", note])

    row("ours: warm-up (warm_up_async().join())", [warm_s], note="once per kernel, in the background")
    row("ours: first run after warm-up (API)", [first_s], [first_v["fn_s"]])
    row("ours: rerun (API)", times["ours rerun (API)"], fn_times["ours rerun (API)"])
    for name in names[1:]:
        if times[name]:
            row(name, times[name], fn_times[name] or None)
    for name, why in skipped.items():
        rows.append([name, 0, "-", "-", "-", "-", "-", why])
    print()
    print(common.table(["launcher", "runs", "median s", "min s", "max s", "cell in rank s", "vs ours rerun",
                        "note"], rows))

    def med(name: str) -> float:
        return common.median(times.get(name, []))

    td_dist, td_local = med("TorchDistributor local_mode=False"), med("TorchDistributor local_mode=True")
    tr, acc = med("torchrun --nproc_per_node 2"), med("accelerate notebook_launcher")
    ratios: dict[str, Any] = {
        "rerun_s": ours_rerun, "first_s": first_s, "warmup_s": warm_s,
        "rerun_over_td_dist": ours_rerun / td_dist, "first_over_td_dist": first_s / td_dist,
    }
    ratios.update(td_dist_over_rerun=td_dist / ours_rerun, td_local_over_rerun=td_local / ours_rerun,
                  torchrun_over_rerun=tr / ours_rerun, accelerate_over_rerun=acc / ours_rerun)
    targets = {"rerun_over_td_dist": 0.05, "first_over_td_dist": 0.25}
    print()
    for key, limit in targets.items():
        if key in ratios and ratios[key] == ratios[key]:
            verdict = "MET" if ratios[key] <= limit else "MISSED"
            print(f"target {key} <= {limit}: {ratios[key]:.4f} {verdict}")
    total = time.perf_counter() - started
    common.save("bench_latency", {"machine": info, "runs": args.runs, "warmup_s": warm_s, "first_s": first_s,
                                  "first_fn_s": first_v["fn_s"], "times": times, "fn_times": fn_times,
                                  "ours_phases": ours_phases, "first_phases": first_phases, "skipped": skipped, "ratios": ratios, "total_s": total})
    gm = phases.median_groups(ours_phases)
    print("\nours, where the time goes (ms; first run, median of reruns):")
    print(common.table(["phase", "first", "rerun", "what"],
                       [[g, f"{1000 * first_phases.get(g, float('nan')):.0f}", f"{1000 * gm.get(g, float('nan')):.0f}",
                         phases.GROUP_NOTES[g]] for g in gm]))
    print(f"# total {total:.0f} s; launcher output in {os.path.relpath(LOG, common.REPO)}")
    print(common.kv_line(ratios))


if __name__ == "__main__":
    main()
