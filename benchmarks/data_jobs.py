"""bench_data's workloads: synthetic images, a CPU-heavy transform (repeated Gaussian blurs), and a training
step whose compute is a stand-in accelerator (a fixed sleep plus a tiny all_reduce, so ranks stay in step
as DDP keeps them). Every mode runs these same functions; shipped to Spark workers and ranks by value.
"""
from __future__ import annotations

import os
import resource
import time
from typing import Any

SIDE = 64
PIXELS = 3 * SIDE * SIDE
_TAPS = (1 / 16, 4 / 16, 6 / 16, 4 / 16, 1 / 16)


# -- data ------------------------------------------------------------------------------------------------------
def image(i: int) -> Any:
    """Image ``i`` (3x64x64 float32), the same wherever it is made."""
    import numpy as np

    return np.random.default_rng(i).random(PIXELS, dtype=np.float32)


GEN_ROWS = 256  # rows per Arrow batch the generator yields (12 MB): big batches exhaust the JVM's Arrow memory


def gen_arrow(batches: Any) -> Any:
    """mapInArrow: ids -> (id, img, label) rows, generated where the task runs, in batches of GEN_ROWS."""
    import numpy as np
    import pyarrow as pa

    for batch in batches:
        for start in range(0, batch.num_rows, GEN_ROWS):
            ids = batch.column(0).to_numpy()[start:start + GEN_ROWS]
            flat = np.concatenate([image(int(i)) for i in ids])
            imgs = pa.FixedSizeListArray.from_arrays(pa.array(flat), PIXELS).cast(pa.list_(pa.float32()))
            yield pa.RecordBatch.from_arrays([pa.array(ids), imgs, pa.array(ids % 10)], ["id", "img", "label"])


def images_df(spark: Any, rows: int, parts: int) -> Any:
    return spark.range(rows, numPartitions=parts).mapInArrow(gen_arrow, "id long, img array<float>, label long")


def _blur_once(x: Any) -> Any:
    """A 5-tap Gaussian blur along H then W of a [B, 3, H, W] array (edges repeated)."""
    import numpy as np

    for axis in (2, 3):
        pad = [(0, 0)] * 4
        pad[axis] = (2, 2)
        p = np.pad(x, pad, mode="edge")
        n = x.shape[axis]
        x = sum(w * np.take(p, range(k, k + n), axis=axis) for k, w in enumerate(_TAPS))
    return x.astype(np.float32)


def blur(x: Any, times: int) -> Any:
    for _ in range(times):
        x = _blur_once(x)
    return x


def blur_transform(times: int) -> Any:
    """The batches() transform: pandas rows -> blurred [B, 3, 64, 64] images and their labels."""
    def transform(pdf: Any) -> dict[str, Any]:
        import numpy as np

        x = np.stack(pdf["img"].to_numpy()).reshape(-1, 3, SIDE, SIDE)
        return {"img": blur(x, times), "label": pdf["label"].to_numpy()}

    transform.__name__ = transform.__qualname__ = f"blur_x{times}"
    return transform


# -- the training loop -------------------------------------------------------------------------------------------
def _step(step_s: float) -> None:
    import torch
    import torch.distributed as dist

    time.sleep(step_s)               # the stand-in accelerator
    t = torch.ones(1)
    if dist.is_initialized():
        dist.all_reduce(t)           # ranks stay in step, as DDP keeps them


def timed_loop(batches: Any, step_s: float, inline_blur: int = 0) -> dict[str, Any]:
    """Train on ``batches``: steps/s after the first two batches (steady), time to the first, the whole epoch
    (from the loop's start to its last step: what a user waits for), peak memory."""
    start = time.perf_counter()
    first = None
    arrived: list[float] = []
    for batch in batches:
        now = time.perf_counter()
        first = first if first is not None else now - start
        arrived.append(now)
        if inline_blur:
            blur(batch["img"].numpy().reshape(-1, 3, SIDE, SIDE), inline_blur)
        _step(step_s)
    steady = arrived[2:]
    rate = (len(steady) - 1) / (steady[-1] - steady[0]) if len(steady) > 2 else float("nan")
    epoch = time.perf_counter() - start
    return {"steps": len(arrived), "steps_per_s": rate, "first_batch_s": first, "epoch_s": epoch,
            "epoch_steps_per_s": len(arrived) / epoch, "pid": os.getpid(),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def train_batches(df: Any, batch: int, step_s: float, transform_times: int, inline: bool) -> dict[str, Any]:
    """(a) inline: raw batches, the blur in the rank's loop; (c) offloaded: the blur on Spark executors."""
    import jupyter_torchdist as jt

    transform = None if inline or not transform_times else blur_transform(transform_times)
    loader = jt.batches(df, batch, transform=transform, seed=0)
    return timed_loop(loader, step_s, inline_blur=transform_times if inline else 0)


def train_dataloader(rows: int, batch: int, step_s: float, transform_times: int, workers: int) -> dict[str, Any]:
    """(b) a torch DataLoader in each rank, ``workers`` processes making and blurring its share."""
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    class Images(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return rows

        def __getitem__(self, i: int) -> Any:
            return i

    def collate(ids: list[int]) -> dict[str, Any]:
        x = np.stack([image(i) for i in ids]).reshape(-1, 3, SIDE, SIDE)
        return {"img": torch.from_numpy(blur(x, transform_times)), "label": torch.tensor(ids) % 10}

    sampler = DistributedSampler(Images(), dist.get_world_size(), dist.get_rank(), shuffle=True, drop_last=True)
    loader = DataLoader(Images(), batch_size=batch, sampler=sampler, num_workers=workers, collate_fn=collate,
                        drop_last=True, prefetch_factor=2 if workers else None, persistent_workers=False)
    return timed_loop(loader, step_s)


def ray_loop(config: dict[str, Any]) -> None:
    """(d) Ray Train's train_loop_per_worker: Ray Data's shard, iter_torch_batches. Results go to a file per
    rank (Ray Train 2's ``result.metrics`` keeps only what is reported with a checkpoint)."""
    import json

    import ray.train

    shard = ray.train.get_dataset_shard("train")
    result = timed_loop(shard.iter_torch_batches(batch_size=config["batch"], prefetch_batches=2), config["step_s"])
    rank = ray.train.get_context().get_world_rank()
    with open(os.path.join(config["out"], f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
