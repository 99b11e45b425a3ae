"""Issue 23, item 1: the first cell of a fresh notebook, side by side in one run.

    python benchmarks/bench_first_cell.py [--kernels 4] [--no-td]

Each round starts fresh kernels (jupyter_client, as a front end drives them), alternating:

- ours: ``%load_ext jupyter_torchdist``, then at once a ``%%distribute -n 2`` cell with the issue-3 DDP job (the
  cell sent the moment ``%load_ext`` returns, as Run All does); the figure is from sending ``%load_ext`` to the
  value. Then, in the same kernel, where the seconds went (the warm-up's timeline: process server ready, JVM and
  session up, Python workers warm) and a rerun once the session is warm (the rerun figure, unchanged by this).
- pyspark's TorchDistributor in a fresh kernel: a cell that builds a fresh local SparkSession (``local[4]``) and
  runs ``TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(job)``; from sending it to the value.

Target: ours at least 4 times faster than TorchDistributor's first run (medians), ``%load_ext`` returning at once.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common
from bench_magic import BODY, SETUP

OURS = "%%distribute -n 2\n" + BODY
TD = ("from pyspark.sql import SparkSession\n"
      "spark = SparkSession.builder.master('local[4]').getOrCreate()\n"
      "from pyspark.ml.torch.distributor import TorchDistributor\n" + SETUP.replace("import jupyter_torchdist\n", "") +
      "\nprint(TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(trivial))\n")
TIMELINE = ("from jupyter_torchdist.launchers.session import embedded as s\n"
            "from jupyter_torchdist.launchers import local_server as z\n"
            "import time\nwhile 'workers_warm' not in s.timeline and s._warm_thread.is_alive(): time.sleep(0.1)\n"
            "dict(s.timeline)")


def parse_args() -> argparse.Namespace:
    ap = common.parser(__doc__)
    ap.add_argument("--kernels", type=int, default=4, help="fresh kernels per side")
    ap.add_argument("--no-td", action="store_true", help="skip TorchDistributor")
    return ap.parse_args()


def ours() -> dict[str, Any]:
    ks = common.KernelSession(env={"JUPYTER_TORCHDIST_WARMUP": "1"})
    try:
        t0 = time.time()
        load = ks.run("%load_ext jupyter_torchdist")["seconds"]
        first = ks.run(OURS)
        total = time.time() - t0
        timeline = eval(ks.run(TIMELINE)["result"] or "None") or {}
        ks.run(OURS)  # the first run on the warm session (its workers fork ranks for the first time)
        rerun = ks.run(OURS)["seconds"]
        marks = {k: round(v - t0, 2) for k, v in timeline.items()}
        return {"load_ext_s": load, "first_cell_s": total, "value": first["result"], "rerun_s": rerun, **marks}
    finally:
        ks.close()


def torch_distributor() -> dict[str, Any]:
    ks = common.KernelSession(env={"JUPYTER_TORCHDIST_WARMUP": "0", "PYSPARK_PYTHON": sys.executable})
    try:
        r = ks.run(TD, timeout=600)
        return {"first_cell_s": r["seconds"]}
    finally:
        ks.close()


def _timeline_text(runs: list[dict[str, Any]]) -> str:
    keys = ["load_ext_s", "warm_up_began", "session_asked", "first_cell_s", "session_up", "workers_warm"]
    rows = [[k, common.fmt_list(r.get(k, float("nan")) for r in runs),
             common.fmt_s(common.median([r[k] for r in runs if k in r]))] for k in keys]
    return common.table(["seconds after %load_ext was sent", "each kernel", "median"], rows)


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    info = common.begin("bench_first_cell: %load_ext then the first %%distribute cell at once, vs TorchDistributor's "
                        "first run in a fresh kernel")
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "td": []}
    for r in range(args.kernels):
        for side in common.rotated(["ours", "td"], r):
            if side == "td" and args.no_td:
                continue
            result = ours() if side == "ours" else torch_distributor()
            runs[side].append(result)
            print(f"round {r} {side}: {common.kv_line(result)}", flush=True)
    med = {side: common.median([x["first_cell_s"] for x in xs]) for side, xs in runs.items() if xs}
    print(_timeline_text(runs["ours"]))
    rows = [[side, common.fmt_list(x["first_cell_s"] for x in xs), common.fmt_s(med[side])]
            for side, xs in runs.items() if xs]
    print(common.table(["first cell in a fresh kernel", "each kernel (s)", "median s"], rows))
    values = {"ours_first_s": med["ours"], "ours_load_ext_s": common.median([x["load_ext_s"] for x in runs["ours"]]),
              "ours_rerun_s": common.median([x["rerun_s"] for x in runs["ours"]])}
    if "td" in med:
        values.update(td_first_s=med["td"], td_over_ours=med["td"] / med["ours"])
        common.check_targets(values, [("td_over_ours", 4.0, True)])
    common.finish("bench_first_cell", {"machine": info, "runs": runs}, started, values)


if __name__ == "__main__":
    main()
