"""Issue #26: executors that register after the run was asked for, ours against pyspark's TorchDistributor.

    python benchmarks/bench_late_executors.py [--rounds 2] [--late 6]

Each round, for each launcher (the order alternates): a fresh standalone master with no worker
(``tests/support/cluster.py``, from the pip pyspark), a fresh SparkSession on it in this process, the
launcher's run of a 2-rank job asked for on a helper thread, a 2-core worker started ``--late`` seconds later.
Measured: from the worker's registration with the master to the ranks' code starting (rank 0's clock). Spark's own
barrier slot check (what TorchDistributor relies on) retries every 15 s; ours watches the session's slots.
"""
from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import common

from tests.support.cluster import add_worker, session_conf, spark_env, start, stop


def started_at() -> float:
    import time as _t

    import torch
    import torch.distributed as dist

    if not dist.is_initialized():  # pyspark's TorchDistributor leaves that to the function; ours has done it
        dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    return _t.time()


def ours() -> Any:
    import jupyter_torchdist as jt

    return jt.run(started_at, n=2)


def td() -> Any:
    from pyspark.ml.torch.distributor import TorchDistributor

    return TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(started_at)


def _round(launcher: Callable[[], Any], late_s: float) -> float:
    """Seconds from the worker's registration to rank 0's code starting."""
    from pyspark.sql import SparkSession

    c = start(Path(tempfile.mkdtemp(prefix="bench-late-")), workers=0)
    for k, v in spark_env(c.workdir).items():
        if k.startswith(("SPARK_", "PYSPARK")):
            os.environ[k] = v
    builder = SparkSession.builder
    for k, v in session_conf(c.url).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    out: dict[str, Any] = {}
    try:
        thread = threading.Thread(target=lambda: out.update(t=launcher()), daemon=True)
        thread.start()
        time.sleep(late_s)
        add_worker(c, 0, cores=2)  # from this (the main) thread: the JVMs die with the thread that started them
        registered = time.time()
        thread.join(600)
        return float(out["t"]) - registered
    finally:
        spark.stop()
        stop(c)


def main() -> None:
    p = common.parser(__doc__)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--late", type=float, default=6.0)
    args = p.parse_args()
    info = common.begin("executors that come later: registration -> ranks started")
    t0 = time.perf_counter()
    launchers = {"jupyter-torchdist": ours, "TorchDistributor": td}
    times: dict[str, list[float]] = {name: [] for name in launchers}
    for r in range(args.rounds):
        for name in common.rotated(list(launchers), r):
            times[name].append(_round(launchers[name], args.late))
            print(f"# round {r + 1} {name}: {times[name][-1]:.1f} s", flush=True)
    rows = [[name, common.fmt_list(ts), common.fmt_s(common.median(ts))] for name, ts in times.items()]
    print(common.table(["launcher", "registration -> ranks started (s), each round", "median"], rows))
    ours_s, td_s = common.median(times["jupyter-torchdist"]), common.median(times["TorchDistributor"])
    common.finish("bench_late_executors", {"machine": info, "times": times, "late_s": args.late}, t0,
                  {"ours_s": ours_s, "td_s": td_s, "td_over_ours": td_s / ours_s})


if __name__ == "__main__":
    main()
