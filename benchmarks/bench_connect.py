"""Issue #20: launch latency on a Spark Connect session, ours against pyspark's TorchDistributor, side by side.

    python benchmarks/bench_connect.py [--runs 5]

A real Spark Connect server in its own process (local[4], from the pip pyspark, its Python workers forking from
our daemon as a server admin may set), and this process as its client (``SparkSession.builder.remote``), as a
notebook on Databricks Connect or Spark 4's thin client is. The job: the trivial 2-rank DDP job of
bench_latency (Linear(10, 1), 10 steps on gloo). First, one no-op barrier operation starts the server's Python
workers for both; then each launcher's first run (the order alternates with --first), then reruns round-robin.
Prints a table and one ``key=value`` line of ratios.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import common

jobs = common.register_jobs()
LOG = os.path.join(common.RESULTS, "bench_connect.launchers.log")


def _noop(batches: Any) -> Any:
    yield from batches


def ours() -> Any:
    import jupyter_torchdist as jt

    return jt.run(jobs.trivial_ddp, n=2)


def td() -> Any:
    from pyspark.ml.torch.distributor import TorchDistributor

    with common.fd_silenced(LOG):
        return TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(jobs.trivial_ddp)


def _measure(launchers: dict[str, Callable[[], Any]], runs: int, first: str) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in launchers}
    order = [first] + [n for n in launchers if n != first]
    firsts = {}
    for name in order:
        firsts[name] = common.timed(launchers[name])[0]
        print(f"# first run {name}: {firsts[name]:.2f} s", flush=True)
    for r in range(runs):
        for name in common.rotated(list(launchers), r):
            time.sleep(0.5)
            times[name].append(common.timed(launchers[name])[0])
    return {**{f"{n} first": [s] for n, s in firsts.items()}, **{f"{n} rerun": t for n, t in times.items()}}


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--first", choices=["ours", "TorchDistributor"], default="TorchDistributor",
                   help="which launcher's first run comes first (it finds the server's workers less warm)")
    args = p.parse_args()
    started = time.perf_counter()
    info = common.begin("Spark Connect: ours vs TorchDistributor on the same Connect session")
    from tests.support.connect_server import start_server, stop

    server = start_server(Path(tempfile.mkdtemp(prefix="bench-connect-")))
    try:
        from pyspark.sql import SparkSession

        t0 = time.perf_counter()
        spark = SparkSession.builder.remote(server.url).getOrCreate()
        spark.range(0, 2, 1, 2).mapInArrow(_noop, "id long", barrier=True).collect()
        print(f"# server up in {server.started_in_s:.1f} s; client and the workers' warm-up "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
        results = _measure({"ours": ours, "TorchDistributor": td}, args.runs, args.first)
    finally:
        stop(server)
    rows = [[name, common.fmt_s(common.median(ts)), common.fmt_list(ts)] for name, ts in results.items()]
    print(common.table(["launcher", "median s", "runs"], rows))
    kv = {"first_ours_s": results["ours first"][0], "first_td_s": results["TorchDistributor first"][0],
          "rerun_ours_s": common.median(results["ours rerun"]),
          "rerun_td_s": common.median(results["TorchDistributor rerun"])}
    kv["first_ratio"] = kv["first_ours_s"] / kv["first_td_s"]
    kv["rerun_ratio"] = kv["rerun_ours_s"] / kv["rerun_td_s"]
    common.finish("bench_connect", {"machine": info, "runs": results, **kv}, started, kv)


if __name__ == "__main__":
    main()
