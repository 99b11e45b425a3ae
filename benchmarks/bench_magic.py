"""Issue #3, item 1 through the real magic path: a real IPython kernel, ``%load_ext`` then
``%%distribute -n 2`` cells, against TorchDistributor(local_mode=False) run in the same kernel
(so on the same SparkSession: ours, which it finds as the active session).

    python benchmarks/bench_magic.py [--kernels 5] [--runs 5] [--no-td]

Each of ``--kernels`` fresh kernels (jupyter_client KernelManager, as a front end drives it) gives:
kernel start; ``%load_ext jupyter_torchdist`` plus waiting for its background warm-up; the first
``%%distribute -n 2`` cell (magic, cell compile, capture and live widget included); one
TorchDistributor(num_processes=2, local_mode=False, use_gpu=False) run of the same job. The last
kernel then gives ``--runs`` reruns, round-robin: ``%%distribute -n 2``, ``%%distribute -n 2 --quiet``
(no widget) and ``jupyter_torchdist.run(fn, n=2)`` (no magic), so the magic's own cost shows.
Times are the front end's: execute request sent to the kernel idle again.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

BODY = """import torch
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(0)
model = DDP(torch.nn.Linear(10, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 10), torch.randn(32, 1)
for _ in range(10):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
loss.item()
"""
CELL = "%%distribute -n 2\n" + BODY
CELL_QUIET = "%%distribute -n 2 --quiet\n" + BODY
SETUP = '''import jupyter_torchdist

def trivial():
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    opened = not dist.is_initialized()
    if opened:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(10, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 10), torch.randn(32, 1)
    for _ in range(10):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    if opened:
        dist.destroy_process_group()
    return loss.item()
'''
TD_CELL = ("from pyspark.ml.torch.distributor import TorchDistributor\n"
           "TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(trivial)")
API_CELL = "jupyter_torchdist.run(trivial, n=2)"
PAUSE_S = 0.5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=int, default=5, help="fresh kernels: first runs after %%load_ext, TD runs")
    ap.add_argument("--runs", type=int, default=5, help="reruns of each kind in the last kernel")
    ap.add_argument("--no-td", action="store_true")
    args = ap.parse_args()
    started = time.perf_counter()
    common.wait_for_quiet()
    info = common.machine()
    common.header("bench_magic: %load_ext + %%distribute -n 2 in real IPython kernels, vs TorchDistributor "
                  "in the same kernels", info)
    res: dict[str, list[float]] = {k: [] for k in ("kernel_start", "load_ext", "warmup", "first", "td_dist",
                                                   "rerun", "rerun_quiet", "api_rerun", "teardown")}
    iopub_first: dict[str, int] = {}
    for k in range(args.kernels):
        ks = common.KernelSession(env={"JUPYTER_TORCHDIST_WARMUP": "1"})
        try:
            res["kernel_start"].append(ks.start_s)
            ks.run(SETUP)
            t0 = time.perf_counter()
            res["load_ext"].append(ks.run("%load_ext jupyter_torchdist")["seconds"])
            ks.run("from jupyter_torchdist.launchers.spark import warm_up_async as _w\n_w().join()")
            res["warmup"].append(time.perf_counter() - t0)
            time.sleep(PAUSE_S)
            first = ks.run(CELL)
            res["first"].append(first["seconds"])
            iopub_first = first["iopub"]
            line = (f"kernel {k}: start {ks.start_s:.2f} s | %load_ext {res['load_ext'][-1]:.3f} s, + warm-up "
                    f"{res['warmup'][-1]:.2f} s | first %%distribute {first['seconds']:.3f} s -> {first['result']}")
            if not args.no_td:
                time.sleep(PAUSE_S)
                tdr = ks.run(TD_CELL)
                res["td_dist"].append(tdr["seconds"])
                line += f" | TorchDistributor(local_mode=False) {tdr['seconds']:.2f} s -> {tdr['result']}"
            print(line, flush=True)
            if k == args.kernels - 1:
                kinds = [("rerun", CELL), ("rerun_quiet", CELL_QUIET), ("api_rerun", API_CELL)]
                for r in range(args.runs):
                    for key, code in kinds[r % 3:] + kinds[:r % 3]:
                        time.sleep(PAUSE_S)
                        res[key].append(ks.run(code)["seconds"])
                print(f"kernel {k} reruns: %%distribute {common.fmt_list(res['rerun'])} | --quiet "
                      f"{common.fmt_list(res['rerun_quiet'])} | run() {common.fmt_list(res['api_rerun'])}",
                      flush=True)
        finally:
            res["teardown"].append(ks.close())

    med = {k: common.median(v) for k, v in res.items()}
    td_dist = med["td_dist"]
    labels = [
        ("kernel_start", "kernel start (ipykernel ready)", ""),
        ("load_ext", "%load_ext jupyter_torchdist (cell)", "returns at once; warm-up goes on in the background"),
        ("warmup", "%load_ext + background warm-up done", "session, daemon, workers"),
        ("first", "first %%distribute -n 2 after %load_ext", "magic + capture + widget"),
        ("rerun", "%%distribute -n 2 rerun", "magic + capture + widget"),
        ("rerun_quiet", "%%distribute -n 2 --quiet rerun", "no widget"),
        ("api_rerun", "jupyter_torchdist.run(fn, n=2) rerun", "no magic, no view"),
        ("td_dist", "TorchDistributor(local_mode=False), same kernel", "same SparkSession"),
        ("teardown", "kernel shutdown until its JVM, daemon, workers are gone", "not a launch cost"),
    ]
    rows = []
    for key, label, note in labels:
        xs = res[key]
        rows.append([label, len(xs), common.fmt_s(med[key]), common.fmt_s(min(xs) if xs else None),
                     common.fmt_s(max(xs) if xs else None),
                     f"{td_dist / med[key]:.1f}x" if xs and td_dist == td_dist else "-", note])
    print()
    print(common.table(["what (front end's time)", "runs", "median s", "min s", "max s", "TD(dist) / this", "note"],
                       rows))
    print(f"\niopub messages of the first %%distribute cell: {iopub_first}")
    ratios = {
        "magic_first_s": med["first"], "magic_rerun_s": med["rerun"], "magic_quiet_rerun_s": med["rerun_quiet"],
        "api_rerun_in_kernel_s": med["api_rerun"], "magic_overhead_s": med["rerun"] - med["api_rerun"],
        "widget_overhead_s": med["rerun"] - med["rerun_quiet"], "warmup_s": med["warmup"], "td_dist_s": td_dist,
        "magic_first_over_td_dist": med["first"] / td_dist, "magic_rerun_over_td_dist": med["rerun"] / td_dist,
    }
    print()
    for key, limit in (("magic_rerun_over_td_dist", 0.05), ("magic_first_over_td_dist", 0.25)):
        if ratios[key] == ratios[key]:
            print(f"target {key} <= {limit}: {ratios[key]:.4f} {'MET' if ratios[key] <= limit else 'MISSED'}")
    total = time.perf_counter() - started
    common.save("bench_magic", {"machine": info, "results": res, "medians": med, "ratios": ratios,
                                "iopub_first": iopub_first, "total_s": total})
    print(f"# total {total:.0f} s")
    print(common.kv_line(ratios))


if __name__ == "__main__":
    main()
