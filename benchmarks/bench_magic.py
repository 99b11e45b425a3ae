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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common

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
KEYS = ("kernel_start", "load_ext", "warmup", "first", "td_dist", "rerun", "rerun_quiet", "api_rerun", "teardown")
LABELS = [  # (key, row label, note)
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


def parse_args() -> argparse.Namespace:
    ap = common.parser(__doc__)
    ap.add_argument("--kernels", type=int, default=5, help="fresh kernels: first runs after %%load_ext, TD runs")
    ap.add_argument("--runs", type=int, default=5, help="reruns of each kind in the last kernel")
    ap.add_argument("--no-td", action="store_true")
    return ap.parse_args()


def first_runs(ks: common.KernelSession, k: int, no_td: bool, res: dict[str, list[float]]) -> dict[str, int]:
    """In a fresh kernel: %load_ext and its warm-up, the first cell, one TorchDistributor run; prints a line.
    Returns the first cell's iopub message counts."""
    res["kernel_start"].append(ks.start_s)
    ks.run(SETUP)
    load_ext_s, warm_s = ks.load_extension()
    res["load_ext"].append(load_ext_s)
    res["warmup"].append(warm_s)
    time.sleep(PAUSE_S)
    first = ks.run(CELL)
    res["first"].append(first["seconds"])
    line = (f"kernel {k}: start {ks.start_s:.2f} s | %load_ext {res['load_ext'][-1]:.3f} s, + warm-up "
            f"{res['warmup'][-1]:.2f} s | first %%distribute {first['seconds']:.3f} s -> {first['result']}")
    if not no_td:
        time.sleep(PAUSE_S)
        tdr = ks.run(TD_CELL)
        res["td_dist"].append(tdr["seconds"])
        line += f" | TorchDistributor(local_mode=False) {tdr['seconds']:.2f} s -> {tdr['result']}"
    print(line, flush=True)
    return first["iopub"]


def reruns(ks: common.KernelSession, k: int, runs: int, res: dict[str, list[float]]) -> None:
    """``runs`` rounds of the three rerun kinds, round-robin, in kernel ``k``; prints them."""
    kinds = [("rerun", CELL), ("rerun_quiet", CELL_QUIET), ("api_rerun", API_CELL)]
    for r in range(runs):
        for key, code in common.rotated(kinds, r):
            time.sleep(PAUSE_S)
            res[key].append(ks.run(code)["seconds"])
    print(f"kernel {k} reruns: %%distribute {common.fmt_list(res['rerun'])} | --quiet "
          f"{common.fmt_list(res['rerun_quiet'])} | run() {common.fmt_list(res['api_rerun'])}",
          flush=True)


def measure(args: argparse.Namespace) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Every kernel's first runs, the last kernel's reruns, and each kernel's teardown: (times, iopub of
    the last first cell)."""
    res: dict[str, list[float]] = {k: [] for k in KEYS}
    iopub_first: dict[str, int] = {}
    for k in range(args.kernels):
        ks = common.KernelSession(env={"JUPYTER_TORCHDIST_WARMUP": "1"})
        try:
            iopub_first = first_runs(ks, k, args.no_td, res)
            if k == args.kernels - 1:
                reruns(ks, k, args.runs, res)
        finally:
            res["teardown"].append(ks.close())
    return res, iopub_first


def print_table(res: dict[str, list[float]], med: dict[str, float]) -> None:
    td_dist = med["td_dist"]
    rows = []
    for key, label, note in LABELS:
        xs = res[key]
        rows.append([label, len(xs), common.fmt_s(med[key]), common.fmt_s(min(xs) if xs else None),
                     common.fmt_s(max(xs) if xs else None),
                     f"{td_dist / med[key]:.1f}x" if xs and td_dist == td_dist else "-", note])
    print()
    print(common.table(["what (front end's time)", "runs", "median s", "min s", "max s", "TD(dist) / this", "note"],
                       rows))


def ratios_of(med: dict[str, float]) -> dict[str, float]:
    td_dist = med["td_dist"]
    return {
        "magic_first_s": med["first"], "magic_rerun_s": med["rerun"], "magic_quiet_rerun_s": med["rerun_quiet"],
        "api_rerun_in_kernel_s": med["api_rerun"], "magic_overhead_s": med["rerun"] - med["api_rerun"],
        "widget_overhead_s": med["rerun"] - med["rerun_quiet"], "warmup_s": med["warmup"], "td_dist_s": td_dist,
        "magic_first_over_td_dist": med["first"] / td_dist, "magic_rerun_over_td_dist": med["rerun"] / td_dist,
    }


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    info = common.begin("bench_magic: %load_ext + %%distribute -n 2 in real IPython kernels, vs TorchDistributor "
                        "in the same kernels")
    res, iopub_first = measure(args)
    med = {k: common.median(v) for k, v in res.items()}
    print_table(res, med)
    print(f"\niopub messages of the first %%distribute cell: {iopub_first}")
    ratios = ratios_of(med)
    print()
    common.print_targets(ratios, {"magic_rerun_over_td_dist": 0.05, "magic_first_over_td_dist": 0.25})
    common.finish("bench_magic", {"machine": info, "results": res, "medians": med, "ratios": ratios,
                                  "iopub_first": iopub_first}, started, ratios)


if __name__ == "__main__":
    main()
