"""The embedded session's start from the archive of Spark's classes, against without it, side by side in one run.

    python benchmarks/bench_class_archive.py [--rounds 4]

Each round starts, alternating which goes first, two fresh Python processes that do what a notebook's first minute
does to the embedded session (``launchers/session/class_archive.py``): its warm-up (the JVM, the session, four Python
workers), then a SQL job and a barrier job, then stop. One with this environment's archive (``jupyter-torchdist
prepare`` builds it first if need be), one with ``JUPYTER_TORCHDIST_JVM_ARCHIVE=off``. Measured: seconds to the
session up, to the workers warm, to the jobs done (wall), and the CPU-seconds of the process and its JVM.

Target: the session up in at most 0.6 of the time without the archive (medians), and at most 0.6 of the CPU.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common

SESSION = r"""
import json, time
t0 = time.time()
from jupyter_torchdist.launchers.session import embedded
embedded.warm_up_async().join()
spark, _ = embedded.get_session()
spark.range(1000).selectExpr("sum(id)").collect()
spark.sparkContext.parallelize(range(2), 2).barrier().mapPartitions(lambda it: it).collect()
t1 = time.time()
marks = {k: v - t0 for k, v in embedded.timeline.items() if k in ("session_up", "workers_warm")}
embedded.stop_embedded_session(jvm=True)
print("RESULT " + json.dumps({**marks, "jobs_done": t1 - t0}), flush=True)
"""


def one(archive: bool) -> dict[str, Any]:
    env = {**os.environ, "JUPYTER_TORCHDIST_JVM_ARCHIVE": "on" if archive else "off"}
    env.pop("SPARK_SUBMIT_OPTS", None)  # as a user's kernel starts it
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-c", SESSION], env=env, capture_output=True, text=True, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(out.stdout[-2000:] + out.stderr[-2000:])
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {**json.loads(line[7:]), "cpu_s": cpu}


def main() -> None:
    ap = common.parser(__doc__)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    started = time.perf_counter()
    prepared = subprocess.run([sys.executable, "-m", "jupyter_torchdist", "prepare"], capture_output=True, text=True)
    print("# " + (prepared.stdout.strip() or prepared.stderr.strip()))
    info = common.begin("bench_class_archive: the embedded session from the archive of Spark's classes, vs without")
    results: dict[str, list[dict[str, Any]]] = {"archive": [], "none": []}
    for r in range(args.rounds):
        for side in common.rotated(["archive", "none"], r):
            results[side].append(one(side == "archive"))
            print(f"round {r} {side}: {common.kv_line(results[side][-1])}", flush=True)
    keys = ("session_up", "workers_warm", "jobs_done", "cpu_s")
    medians = {side: {k: common.median([x[k] for x in runs]) for k in keys} for side, runs in results.items()}
    rows = [[k, common.fmt_s(medians["none"][k]), common.fmt_s(medians["archive"][k]),
             f"{medians['archive'][k] / medians['none'][k]:.2f}"] for k in keys]
    print(common.table(["median", "without", "with the archive", "ratio"], rows))
    ratios = {f"{k}_ratio": medians["archive"][k] / medians["none"][k] for k in keys}
    common.check_targets(ratios, [("session_up_ratio", 0.6, False), ("cpu_s_ratio", 0.6, False)])
    common.finish("bench_class_archive", {"machine": info, "rounds": results, "medians": medians, **ratios},
                  started, {**{f"{k}_with": medians["archive"][k] for k in keys},
                            **{f"{k}_without": medians["none"][k] for k in keys}, **ratios})


if __name__ == "__main__":
    main()
