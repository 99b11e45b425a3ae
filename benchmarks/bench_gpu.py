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

import common  # noqa: E402

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-kernel", action="store_true")
    args = ap.parse_args()
    started = time.perf_counter()
    info = common.machine()
    common.header("bench_gpu: NCCL DDP on 1 GPU, ours vs torchrun; CUDA launch latency", info)
    why = cuda_status()
    if why is not None:
        print(f"SKIPPED: {why}. This benchmark needs an NVIDIA GPU with a CUDA build of torch; "
              "nothing was measured.")
        print(common.table(["measurement", "result"], [
            ["throughput ours / torchrun (NCCL, 1 GPU)", "skipped"],
            ["first run after warm-up (CUDA)", "skipped"],
            ["rerun (CUDA)", "skipped"],
        ]))
        common.save("bench_gpu", {"machine": info, "skipped": why})
        print(common.kv_line({"gpu": "skipped", "reason": "no_cuda"}))
        return
    common.wait_for_quiet()

    import jupyter_torchdist as jtd
    from jupyter_torchdist.launchers import spark as backend

    # -- latency ------------------------------------------------------------------------------------------------------
    warm_s, _ = common.timed(lambda: backend.warm_up_async().join())
    first_s, _ = common.timed(lambda: jtd.run(jobs.gpu_trivial, n=1, gpu=True))
    reruns, tr = [], []
    for _ in range(args.runs):
        time.sleep(0.5)
        reruns.append(common.timed(lambda: jtd.run(jobs.gpu_trivial, n=1, gpu=True))[0])
        time.sleep(0.5)
        tr.append(common.run_torchrun("gpu_trivial", {}, nproc=1)[0])
    print(f"warm-up {warm_s:.2f} s, first {first_s:.3f} s, reruns {common.fmt_list(reruns)}, "
          f"torchrun {common.fmt_list(tr)}", flush=True)

    kernel: dict[str, Any] = {}
    if not args.no_kernel:
        ks = common.KernelSession(env={"JUPYTER_TORCHDIST_WARMUP": "1"})
        try:
            t0 = time.perf_counter()
            ks.run("%load_ext jupyter_torchdist")
            ks.run("from jupyter_torchdist.launchers.spark import warm_up_async as _w\n_w().join()")
            kernel["warmup_s"] = time.perf_counter() - t0
            kernel["first_s"] = ks.run(GPU_CELL)["seconds"]
            kernel["rerun_s"] = []
            for _ in range(args.runs):
                time.sleep(0.5)
                kernel["rerun_s"].append(ks.run(GPU_CELL)["seconds"])
        finally:
            ks.close()
        print(f"kernel: warm-up {kernel['warmup_s']:.2f} s, first %%distribute --gpu {kernel['first_s']:.3f} s, "
              f"reruns {common.fmt_list(kernel['rerun_s'])}", flush=True)

    # -- throughput -------------------------------------------------------------------------------------------------
    ours_t, theirs_t = [], []
    for r in range(args.rounds):
        pair = [("ours", lambda: jtd.run(jobs.gpu_throughput, n=1, gpu=True)["steps_per_s"]),
                ("torchrun", lambda: common.run_torchrun("gpu_throughput", {}, nproc=1)[1][0]["steps_per_s"])]
        if r % 2:
            pair.reverse()
        for name, fn in pair:
            time.sleep(0.5)
            (ours_t if name == "ours" else theirs_t).append(fn())
        print(f"round {r}: ours {ours_t[-1]:.1f} steps/s, torchrun {theirs_t[-1]:.1f} steps/s", flush=True)

    o, t = common.median(ours_t), common.median(theirs_t)
    rows = [
        ["warm-up (warm_up_async().join())", common.fmt_s(warm_s), ""],
        ["first run after warm-up (API, CUDA)", common.fmt_s(first_s), ""],
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
    kv = {"gpu_ratio": o / t, "gpu_first_s": first_s, "gpu_rerun_s": common.median(reruns),
          "gpu_torchrun_s": common.median(tr), "gpu_torchrun_over_rerun": common.median(tr) / common.median(reruns)}
    if kernel:
        kv.update(gpu_magic_first_s=kernel["first_s"], gpu_magic_rerun_s=common.median(kernel["rerun_s"]))
    print(f"\ntarget gpu_ratio >= 0.97: {o / t:.3f} {'MET' if o / t >= 0.97 else 'MISSED'}")
    common.save("bench_gpu", {"machine": info, "warmup_s": warm_s, "first_s": first_s, "reruns": reruns,
                              "torchrun": tr, "kernel": kernel, "ours_steps": ours_t, "torchrun_steps": theirs_t,
                              "kv": kv, "total_s": time.perf_counter() - started})
    print(common.kv_line(kv))


if __name__ == "__main__":
    main()
