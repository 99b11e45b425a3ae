"""Issue #3, item 1: launch latency of the trivial 2-rank DDP job, cell start to value back.

    python benchmarks/bench_latency.py [--runs 5] [--no-td] [--no-accelerate]

Side by side, in one run, in one process, on this machine and one local SparkSession (our embedded
one, which TorchDistributor finds as the active session):
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

import common
import phases

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
    _, values = common.run_torchrun("trivial_ddp", {}, nproc=2, env=common.LOOPBACK_ENV)
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
    except Exception as exc:
        return f"accelerate does not import: {type(exc).__name__}: {exc}"
    return None


class OursRerun:
    """Our rerun as one of the launchers: keeps the time inside ``phases.record`` (``inner_s``, the JVM's
    marks are read after it) and every run's phase groups."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.phases: list[dict[str, float]] = []
        self.inner_s: float | None = None

    def __call__(self) -> Any:
        seconds, value, groups = common.timed_run(self.spark, jobs.trivial_ddp, 2)
        self.inner_s = seconds
        self.phases.append(groups)
        return value


def parse_args() -> argparse.Namespace:
    ap = common.parser(__doc__)
    ap.add_argument("--runs", type=int, default=5, help="reruns / competitor runs (medians of these)")
    ap.add_argument("--no-td", action="store_true")
    ap.add_argument("--no-accelerate", action="store_true")
    return ap.parse_args()


def first_run() -> tuple[Any, float, float, dict[str, Any], dict[str, float]]:
    """Ours, Python API: the warm-up, then the first run: (spark, warm-up s, first s, its value, its phases)."""
    from jupyter_torchdist.launchers.session import embedded as backend

    warm_s = common.warm_up()
    spark, _ = backend.get_session()
    print(f"ours: warm-up {warm_s:.2f} s on {spark.sparkContext.master}", flush=True)
    time.sleep(PAUSE_S)
    first_s, first_v, first_phases = common.timed_run(spark, jobs.trivial_ddp, 2)
    print(f"ours: first run after warm-up {first_s:.3f} s (cell in rank {first_v['fn_s']:.3f} s)", flush=True)
    return spark, warm_s, first_s, first_v, first_phases


def competitors(args: argparse.Namespace, ours: OursRerun) -> tuple[dict[str, Callable[[], Any]], dict[str, str]]:
    """Our rerun and every competitor to measure, and those skipped (with why)."""
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
    return launchers, skipped


def measure_one(launcher: Callable[[], Any]) -> tuple[float, Any]:
    """(seconds, value) of one launch; ours counts only the time inside its phase recording."""
    dt, value = common.timed(launcher)
    if isinstance(launcher, OursRerun) and launcher.inner_s is not None:
        dt, launcher.inner_s = launcher.inner_s, None
    return dt, value


def round_robin(launchers: dict[str, Callable[[], Any]], runs: int,
                skipped: dict[str, str]) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """``runs`` rounds over every launcher, the order rotating each round: (times, cell-in-rank times).
    A launcher that fails is a result (in ``skipped``), not a crash."""
    times: dict[str, list[float]] = {k: [] for k in launchers}
    fn_times: dict[str, list[float]] = {k: [] for k in launchers}
    for r in range(runs):
        order = common.rotated(list(launchers), r)
        for name in order:
            time.sleep(PAUSE_S)
            try:
                dt, value = measure_one(launchers[name])
            except Exception as exc:
                skipped[name] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                traceback.print_exc()
                continue
            times[name].append(dt)
            if isinstance(value, dict) and "fn_s" in value:
                fn_times[name].append(value["fn_s"])
        print(f"round {r}: " + ", ".join(f"{SHORT[n]} {times[n][-1]:.2f}" for n in order if times[n]),
              flush=True)
    return times, fn_times


def row(name: str, xs: list[float], base: float, fns: list[float] | None = None, note: str = "") -> list[Any]:
    """One launcher's row: runs, median/min/max, cell in rank, and how it compares with our rerun."""
    med = common.median(xs)
    return [name, len(xs), common.fmt_s(med), common.fmt_s(min(xs) if xs else None),
            common.fmt_s(max(xs) if xs else None), common.fmt_s(common.median(fns)) if fns else "-",
            f"{med / base:.1f}x" if xs else "-", note]


def print_table(times: dict[str, list[float]], fn_times: dict[str, list[float]], skipped: dict[str, str],
                warm_s: float, first_s: float, first_fn_s: float) -> None:
    base = common.median(times["ours rerun (API)"])
    rows = [row("ours: warm-up (warm_up_async().join())", [warm_s], base, note="once per kernel, in the background"),
            row("ours: first run after warm-up (API)", [first_s], base, [first_fn_s]),
            row("ours: rerun (API)", times["ours rerun (API)"], base, fn_times["ours rerun (API)"])]
    for name in list(times)[1:]:
        if times[name]:
            rows.append(row(name, times[name], base, fn_times[name] or None))
    for name, why in skipped.items():
        rows.append([name, 0, "-", "-", "-", "-", "-", why])
    print()
    print(common.table(["launcher", "runs", "median s", "min s", "max s", "cell in rank s", "vs ours rerun",
                        "note"], rows))


def ratios_of(times: dict[str, list[float]], first_s: float, warm_s: float) -> dict[str, Any]:
    """Our times and every competitor's over our rerun (the ``key=value`` line)."""
    def med(name: str) -> float:
        return common.median(times.get(name, []))

    ours_rerun = med("ours rerun (API)")
    td_dist, td_local = med("TorchDistributor local_mode=False"), med("TorchDistributor local_mode=True")
    tr, acc = med("torchrun --nproc_per_node 2"), med("accelerate notebook_launcher")
    ratios: dict[str, Any] = {
        "rerun_s": ours_rerun, "first_s": first_s, "warmup_s": warm_s,
        "rerun_over_td_dist": ours_rerun / td_dist, "first_over_td_dist": first_s / td_dist,
    }
    ratios.update(td_dist_over_rerun=td_dist / ours_rerun, td_local_over_rerun=td_local / ours_rerun,
                  torchrun_over_rerun=tr / ours_rerun, accelerate_over_rerun=acc / ours_rerun)
    return ratios


def print_phases(first_phases: dict[str, float], reruns: list[dict[str, float]]) -> None:
    gm = phases.median_groups(reruns)
    print("\nours, where the time goes (ms; first run, median of reruns):")
    print(common.table(["phase", "first", "rerun", "what"],
                       [[g, f"{1000 * first_phases.get(g, float('nan')):.0f}", f"{1000 * gm.get(g, float('nan')):.0f}",
                         phases.GROUP_NOTES[g]] for g in gm]))


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    info = common.begin("bench_latency: trivial 2-rank DDP job (Linear(10,1), 10 steps, gloo), cell start to value "
                        "back")
    if os.path.exists(LOG):
        os.unlink(LOG)
    spark, warm_s, first_s, first_v, first_phases = first_run()
    ours = OursRerun(spark)
    launchers, skipped = competitors(args, ours)
    times, fn_times = round_robin(launchers, args.runs, skipped)
    print_table(times, fn_times, skipped, warm_s, first_s, first_v["fn_s"])
    ratios = ratios_of(times, first_s, warm_s)
    print()
    common.print_targets(ratios, {"rerun_over_td_dist": 0.05, "first_over_td_dist": 0.25})
    print_phases(first_phases, ours.phases)
    common.finish("bench_latency", {
        "machine": info, "runs": args.runs, "warmup_s": warm_s, "first_s": first_s, "first_fn_s": first_v["fn_s"],
        "times": times, "fn_times": fn_times, "ours_phases": ours.phases, "first_phases": first_phases,
        "skipped": skipped, "ratios": ratios}, started, ratios,
        note=f"; launcher output in {os.path.relpath(LOG, common.REPO)}")


if __name__ == "__main__":
    main()
