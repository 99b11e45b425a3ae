"""Issue 12: preprocessing offloaded to Spark executors while the ranks train, side by side in one run.

    python benchmarks/bench_data.py [--rows 3072] [--batch 16] [--step-ms 100] [--rounds 3]

Synthetic 3x64x64 float images (a DataFrame made by Spark tasks and cached; for Ray, made by Ray tasks and
materialized), a CPU-heavy transform (the blur repeated until one batch takes about one training step on one
core), and a training step whose compute is a stand-in accelerator (a fixed sleep and a tiny all_reduce), so
that 2 cores can show what offloading does. 2 ranks. Every mode runs with the same glibc allocator thresholds
(the ranks and our data workers set them; Ray's workers get them through MALLOC_* variables): without them this
numpy transform is 2.7 to 3.8 times slower, which would be a comparison of allocators. Modes:

  (a) inline      jt.batches without a transform; the blur in the rank's own loop
  (b) dataloader  a torch DataLoader in each rank (1 worker process each) making and blurring its share
  (c) offloaded   jt.batches(..., transform=blur) with 2 data workers (Spark tasks)
  (d) ray         Ray Train's TorchTrainer (2 workers) + Ray Data map_batches(blur) + iter_torch_batches
  (e) petastorm   make_spark_converter, when it can be imported next to this pyspark

Measured per mode: steady steps/s (after the first two batches, mean over ranks), time to the first batch
(from the start of the rank's function), the epoch's steps/s (its steps over the time from the loop's start
to its last step: start-up included; Ray Data computes ahead into its object store while Ray Train starts,
so its steady rate is partly read from a finished buffer), and each rank's peak RSS; then the rank's peak
RSS of (c) with the dataset 10 times larger (no transform, no sleep: the data plane as fast as it goes).
Targets: (c) >= 1.8 x (a); (c) >= 0.95 x (b) steady; (c) >= (d), steady and per epoch; peak RSS flat (10x data
within 1.25x).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common

import data_jobs as J
from jupyter_torchdist.rank.allocator import MMAP_THRESHOLD, TRIM_THRESHOLD, tune_allocator

common.register_by_value(J)


def parse_args() -> argparse.Namespace:
    ap = common.parser(__doc__)
    ap.add_argument("--rows", type=int, default=3072)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--step-ms", type=float, default=100.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="inline,dataloader,offloaded,ray,petastorm")
    return ap.parse_args()


def _timed_blur(x: Any, passes: int) -> float:
    t0 = time.perf_counter()
    J.blur(x, passes)
    return time.perf_counter() - t0


def calibrate(batch: int, step_s: float) -> tuple[int, float]:
    """Blur passes making one batch's transform take one step on one core (at least); (passes, seconds).

    Transform time = step time is where offloading can gain the most (2x: the step and the transform
    overlap instead of adding up), so the comparison is about what each mode loses to overheads. Measured
    after the warm-up (a busy machine would give too few passes): the median of full-length transforms,
    one more pass while that median is short of the step."""
    import math

    import numpy as np

    tune_allocator()  # as in the ranks and the data workers, where the transform runs
    x = np.random.default_rng(0).random((batch, 3, J.SIDE, J.SIDE), dtype=np.float32)
    per = min(_timed_blur(x, 4) / 4 for _ in range(5))
    passes = max(1, math.ceil(step_s / per))
    seconds = common.median([_timed_blur(x, passes) for _ in range(5)])
    while seconds < step_s:
        passes += 1
        seconds = common.median([_timed_blur(x, passes) for _ in range(5)])
    return passes, seconds


def _summary(values: list[dict[str, Any]]) -> dict[str, float]:
    return {"steps_per_s": sum(v["steps_per_s"] for v in values) / len(values),
            "first_batch_s": max(v["first_batch_s"] for v in values),
            "epoch_s": max(v["epoch_s"] for v in values),
            "epoch_steps_per_s": min(v["epoch_steps_per_s"] for v in values),
            "peak_rss_mb": max(v["peak_rss_mb"] for v in values), "steps": values[0]["steps"]}


def run_ours(mode: str, df: Any, args: argparse.Namespace, passes: int) -> dict[str, float]:
    import jupyter_torchdist as jt

    step_s = args.step_ms / 1000
    if mode == "dataloader":
        values = jt.run(J.train_dataloader, args.rows, args.batch, step_s, passes, 1, n=2, all_ranks=True)
    else:
        values = jt.run(J.train_batches, df, args.batch, step_s, passes, mode == "inline", n=2, all_ranks=True,
                        data_workers=2)
    return _summary(values)


def run_ray(args: argparse.Namespace, passes: int) -> dict[str, float]:
    import ray
    from ray.train import DataConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    if not ray.is_initialized():
        # the training workers only sleep: they take a resource of their own, leaving both CPUs to Ray Data
        # Ray's workers get the allocator thresholds our ranks and data workers set (rank/allocator.py), through
        # glibc's environment variables, so that every mode runs the same transform at the same speed
        env = {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD), "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD)}
        ray.init(num_cpus=2, resources={"trainer": 2}, include_dashboard=False, log_to_driver=False,
                 configure_logging=False, runtime_env={"env_vars": env})
    blur = J.blur_transform(passes)

    def make(batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        return {"img": np.stack([J.image(int(i)) for i in batch["id"]]), "label": batch["id"] % 10}

    def transform(batch: dict[str, Any]) -> dict[str, Any]:
        import pandas as pd

        return blur(pd.DataFrame({"img": list(batch["img"]), "label": batch["label"]}))

    source = ray.data.range(args.rows).map_batches(make, batch_size=args.batch).materialize()  # as Spark's cache()
    ds = source.map_batches(transform, batch_size=args.batch)
    out = tempfile.mkdtemp(prefix="bench-data-ray-")
    trainer = TorchTrainer(J.ray_loop, train_loop_config={"batch": args.batch, "step_s": args.step_ms / 1000,
                                                          "out": out},
                           scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"trainer": 1, "CPU": 0}),
                           datasets={"train": ds}, dataset_config=DataConfig())
    trainer.fit()
    values = []
    for name in sorted(os.listdir(out)):
        with open(os.path.join(out, name)) as f:
            values.append(json.load(f))
    shutil.rmtree(out, ignore_errors=True)
    return _summary(values)


def run_petastorm() -> str:
    try:
        from petastorm.spark import make_spark_converter  # noqa: F401
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "importable, but not run here (see the script)"


def memory_flat(spark: Any, args: argparse.Namespace) -> dict[str, float]:
    """The rank's peak RSS reading the dataset, and 10 times the dataset (raw data, no step time)."""
    import jupyter_torchdist as jt

    out = {}
    for scale in (1, 10):
        df = J.images_df(spark, args.rows * scale, 8)
        values = jt.run(J.train_batches, df, args.batch, 0.0, 0, False, n=2, all_ranks=True, data_workers=2)
        out[f"x{scale}"] = _summary(values)["peak_rss_mb"]
    return out


def measure(args: argparse.Namespace, spark: Any, passes: int) -> dict[str, list[dict[str, float]]]:
    # the source in Spark's memory (Ray's is materialized in its object store): both time the transform and the
    # way to the ranks, not making the images
    df = J.images_df(spark, args.rows, 8).cache()
    df.count()
    modes = [m for m in args.modes.split(",") if m in ("inline", "dataloader", "offloaded", "ray")]
    results: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for r in range(args.rounds):
        for mode in common.rotated(modes, r):
            try:
                got = run_ray(args, passes) if mode == "ray" else run_ours(mode, df, args, passes)
            except ImportError as exc:
                print(f"  {mode}: skipped ({exc})", flush=True)
                continue
            results[mode].append(got)
            print(f"  round {r} {mode}: {got['steps_per_s']:.2f} steps/s steady, first batch "
                  f"{got['first_batch_s']:.2f} s, epoch {got['epoch_s']:.1f} s ({got['epoch_steps_per_s']:.2f} "
                  f"steps/s), peak RSS {got['peak_rss_mb']:.0f} MB", flush=True)
    df.unpersist()
    return results


KEYS = ("steps_per_s", "epoch_steps_per_s", "first_batch_s", "epoch_s", "peak_rss_mb")


def report(results: dict[str, list[dict[str, float]]], memory: dict[str, float], petastorm: str) -> dict[str, Any]:
    med = {m: {k: common.median([x[k] for x in xs]) for k in KEYS} for m, xs in results.items() if xs}
    nan = float("nan")
    base = med.get("inline", {}).get("steps_per_s", nan)
    rows = [[m, f"{v['steps_per_s']:.2f}", f"{v['steps_per_s'] / base:.2f}x", f"{v['epoch_steps_per_s']:.2f}",
             f"{v['first_batch_s']:.2f}", f"{v['epoch_s']:.1f}", f"{v['peak_rss_mb']:.0f}"] for m, v in med.items()]
    rows.append(["petastorm", "-", "-", "-", "-", "-", petastorm[:90]])
    print(common.table(["mode", "steady steps/s", "vs inline", "epoch steps/s", "first batch s", "epoch s",
                        "rank peak RSS MB"], rows))
    ours, ray, loader = med.get("offloaded", {}), med.get("ray", {}), med.get("dataloader", {})
    kv = {"offloaded_over_inline": ours.get("steps_per_s", nan) / base,
          "offloaded_over_dataloader": ours.get("steps_per_s", nan) / loader.get("steps_per_s", nan) if loader else nan,
          "offloaded_over_ray": ours.get("steps_per_s", nan) / ray.get("steps_per_s", nan) if ray else nan,
          "offloaded_over_ray_epoch": ours.get("epoch_steps_per_s", nan) / ray.get("epoch_steps_per_s", nan)
          if ray else nan,
          "rss_x1_mb": memory.get("x1", nan), "rss_x10_mb": memory.get("x10", nan),
          "rss_growth": memory.get("x10", nan) / memory.get("x1", nan)}
    common.check_targets(kv, [("offloaded_over_inline", 1.8, True), ("offloaded_over_dataloader", 0.95, True),
                              ("offloaded_over_ray", 1.0, True),
                              ("offloaded_over_ray_epoch", 1.0, True), ("rss_growth", 1.25, False)])
    return {"medians": med, "kv": kv}


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    info = common.begin("bench_data: preprocessing in the rank vs offloaded to Spark executors vs Ray Data")
    from jupyter_torchdist.launchers.session.embedded import get_session

    common.warm_up()
    spark, _ = get_session()
    passes, seconds = calibrate(args.batch, args.step_ms / 1000)
    print(f"transform: {passes} blur passes = {seconds * 1000:.0f} ms per batch of {args.batch} on one core; "
          f"step {args.step_ms:.0f} ms; {args.rows} rows; 2 ranks", flush=True)
    results = measure(args, spark, passes)
    memory = memory_flat(spark, args)
    print(f"rank peak RSS reading {args.rows} rows: {memory['x1']:.0f} MB; "
          f"{args.rows * 10} rows: {memory['x10']:.0f} MB")
    out = report(results, memory, run_petastorm())
    common.finish("bench_data", {"machine": info, "args": vars(args), "passes": passes, "transform_s": seconds,
                                 "results": results, "memory": memory, **out}, started, out["kv"])


if __name__ == "__main__":
    main()
