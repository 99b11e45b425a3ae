"""Issue #3, item 5: GPU. NCCL DDP on 1 GPU under our launcher vs torchrun (steady-state steps/s),
and first-run / rerun latency with CUDA (Python API and the real magic in a kernel).

    python benchmarks/bench_gpu.py [--runs 5] [--rounds 3] [--no-kernel]

Without CUDA (this project's 2-core CPU machine) it prints why and a SKIPPED table, writes
results/bench_gpu.json with ``skipped``, and exits 0, so run_all.sh goes on.

With CUDA:
  * latency: the trivial job on CUDA (jobs.gpu_trivial: Linear(10,1) on cuda, 10 steps, NCCL), one
    rank: the warm-up, the first run after it, ``--runs`` reruns; torchrun --nproc_per_node 1 of the
    same job for reference; then a fresh kernel: %load_ext, first ``%%distribute -n 1 --gpu``, reruns;
  * throughput: jobs.gpu_throughput (an MLP 2048-4096-4096-10, batch 256, steps 30..300 timed after
    cuda.synchronize and a barrier), ours vs torchrun alternating for ``--rounds`` rounds.
The kernel process never touches CUDA itself: ranks are forked from Spark workers and set
CUDA_VISIBLE_DEVICES before their first CUDA call.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common

jobs = common.register_jobs()

GPU_CELL = """%%distribute -n 1 --gpu
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
import jupyter_torchdist as jtd
dev = jtd.device()
model = DDP(torch.nn.Linear(10, 1).to(dev), device_ids=[dev.index])
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 10, device=dev), torch.randn(32, 1, device=dev)
for _ in range(10):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
loss.item()
"""


def cuda_status() -> str | None:
    """None when a CUDA GPU is usable here, else the reason."""
    try:
        import torch
    except ImportError as exc:
        return f"torch does not import: {exc}"
    if not torch.cuda.is_available():
        build = "a CPU-only build" if "+cpu" in torch.__version__ or torch.version.cuda is None else \
            f"CUDA {torch.version.cuda}"
        return (f"no CUDA device (torch {torch.__version__}, {build}; CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')})")
    if not torch.distributed.is_nccl_available():
        return "torch has CUDA but no NCCL"
    return None


def parse_args() -> argparse.Namespace:
    ap = common.parser(__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-kernel", action="store_true")
    return ap.parse_args()


def skip(info: dict[str, Any], why: str) -> None:
    """No usable GPU: say why, print the SKIPPED table, write results/bench_gpu.json with ``skipped``."""
    print(f"SKIPPED: {why}. This benchmark needs an NVIDIA GPU with a CUDA build of torch; "
          "nothing was measured.")
    print(common.table(["measurement", "result"], [
        ["throughput ours / torchrun (NCCL, 1 GPU)", "skipped"],
        ["first run after warm-up (CUDA)", "skipped"],
        ["rerun (CUDA)", "skipped"],
    ]))
    common.save("bench_gpu", {"machine": info, "skipped": why})
    print(common.kv_line({"gpu": "skipped", "reason": "no_cuda"}))


def ours_trivial() -> Any:
    import jupyter_torchdist as jtd

    return jtd.run(jobs.gpu_trivial, n=1, gpu=True)


def api_latency(runs: int) -> dict[str, Any]:
    """The warm-up, the first CUDA run after it, reruns, and torchrun of the same job between them."""
    warm_s = common.warm_up()
    first_s, _ = common.timed(ours_trivial)
    reruns, tr = [], []
    for _ in range(runs):
        time.sleep(0.5)
        reruns.append(common.timed(ours_trivial)[0])
        time.sleep(0.5)
        tr.append(common.run_torchrun("gpu_trivial", {}, nproc=1)[0])
    print(f"warm-up {warm_s:.2f} s, first {first_s:.3f} s, reruns {common.fmt_list(reruns)}, "
          f"torchrun {common.fmt_list(tr)}", flush=True)
    return {"warmup_s": warm_s, "first_s": first_s, "reruns": reruns, "torchrun": tr}


def kernel_latency(runs: int) -> dict[str, Any]:
    """A fresh kernel: %load_ext and its warm-up, the first ``%%distribute -n 1 --gpu``, reruns."""
    kernel: dict[str, Any] = {}
    ks = common.KernelSession(env={"JUPYTER_TORCHDIST_WARMUP": "1"})
    try:
        kernel["warmup_s"] = ks.load_extension()[1]
        kernel["first_s"] = ks.run(GPU_CELL)["seconds"]
        kernel["rerun_s"] = []
        for _ in range(runs):
            time.sleep(0.5)
            kernel["rerun_s"].append(ks.run(GPU_CELL)["seconds"])
    finally:
        ks.close()
    print(f"kernel: warm-up {kernel['warmup_s']:.2f} s, first %%distribute --gpu {kernel['first_s']:.3f} s, "
          f"reruns {common.fmt_list(kernel['rerun_s'])}", flush=True)
    return kernel


def ours_steps() -> float:
    import jupyter_torchdist as jtd

    return jtd.run(jobs.gpu_throughput, n=1, gpu=True)["steps_per_s"]


def torchrun_steps() -> float:
    return common.run_torchrun("gpu_throughput", {}, nproc=1)[1][0]["steps_per_s"]


def throughput(rounds: int) -> tuple[list[float], list[float]]:
    """Steps/s of ours and torchrun, alternating (the order flips each round)."""
    ours_t: list[float] = []
    theirs_t: list[float] = []
    for r in range(rounds):
        pair = [(ours_t, ours_steps), (theirs_t, torchrun_steps)]
        if r % 2:
            pair.reverse()
        for into, fn in pair:
            time.sleep(0.5)
            into.append(fn())
        print(f"round {r}: ours {ours_t[-1]:.1f} steps/s, torchrun {theirs_t[-1]:.1f} steps/s", flush=True)
    return ours_t, theirs_t


def print_table(lat: dict[str, Any], kernel: dict[str, Any], ours_t: list[float], theirs_t: list[float]) -> None:
    o, t = common.median(ours_t), common.median(theirs_t)
    reruns, tr = lat["reruns"], lat["torchrun"]
    rows = [
        ["warm-up (warm_up_async().join())", common.fmt_s(lat["warmup_s"]), ""],
        ["first run after warm-up (API, CUDA)", common.fmt_s(lat["first_s"]), ""],
        ["rerun (API, CUDA), median", common.fmt_s(common.median(reruns)), common.fmt_list(reruns)],
        ["torchrun --nproc_per_node 1 (CUDA), median", common.fmt_s(common.median(tr)), common.fmt_list(tr)],
    ]
    if kernel:
        rows += [["first %%distribute -n 1 --gpu after %load_ext", common.fmt_s(kernel["first_s"]), ""],
                 ["%%distribute -n 1 --gpu rerun, median", common.fmt_s(common.median(kernel["rerun_s"])),
                  common.fmt_list(kernel["rerun_s"])]]
    rows += [["steps/s ours (NCCL, 1 GPU), median", f"{o:.1f}", common.fmt_list(ours_t)],
             ["steps/s torchrun, median", f"{t:.1f}", common.fmt_list(theirs_t)],
             ["ours / torchrun", f"{o / t:.3f}", "target >= 0.97"]]
    print()
    print(common.table(["measurement", "value", "runs"], rows))


def key_values(lat: dict[str, Any], kernel: dict[str, Any], ratio: float) -> dict[str, Any]:
    rerun, tr = common.median(lat["reruns"]), common.median(lat["torchrun"])
    kv = {"gpu_ratio": ratio, "gpu_first_s": lat["first_s"], "gpu_rerun_s": rerun, "gpu_torchrun_s": tr,
          "gpu_torchrun_over_rerun": tr / rerun}
    if kernel:
        kv.update(gpu_magic_first_s=kernel["first_s"], gpu_magic_rerun_s=common.median(kernel["rerun_s"]))
    return kv


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    info = common.machine()
    common.header("bench_gpu: NCCL DDP on 1 GPU, ours vs torchrun; CUDA launch latency", info)
    why = cuda_status()
    if why is not None:
        skip(info, why)
        return
    common.wait_for_quiet()
    lat = api_latency(args.runs)
    kernel = {} if args.no_kernel else kernel_latency(args.runs)
    ours_t, theirs_t = throughput(args.rounds)
    print_table(lat, kernel, ours_t, theirs_t)
    ratio = common.median(ours_t) / common.median(theirs_t)
    kv = key_values(lat, kernel, ratio)
    print(f"\ntarget gpu_ratio >= 0.97: {ratio:.3f} {'MET' if ratio >= 0.97 else 'MISSED'}")
    common.save("bench_gpu", {"machine": info, "warmup_s": lat["warmup_s"], "first_s": lat["first_s"],
                              "reruns": lat["reruns"], "torchrun": lat["torchrun"], "kernel": kernel,
                              "ours_steps": ours_t, "torchrun_steps": theirs_t, "kv": kv,
                              "total_s": time.perf_counter() - started})
    print(common.kv_line(kv))


if __name__ == "__main__":
    main()
