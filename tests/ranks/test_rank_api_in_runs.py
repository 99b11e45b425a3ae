"""The Horovod-style rank helpers inside real runs (real processes, gloo): identity, main_first, on_main, barrier,
report."""
from __future__ import annotations

import os
import sys
import time

import cloudpickle
import pytest

import jupyter_torchdist as jt

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def identity():
    return {"rank": jt.rank(), "local_rank": jt.local_rank(), "world": jt.world_size(),
            "local_world": jt.local_world_size(), "main": jt.is_main(), "device": str(jt.device())}


def main_first_order(marker_dir: str):
    """Rank 0 lingers in the block; everyone logs when they enter and leave it."""
    with jt.main_first():
        entered = time.time()
        if jt.is_main():
            with open(os.path.join(marker_dir, "cache"), "w") as f:  # e.g. a download the others reuse
                f.write("built by rank 0")
            time.sleep(1.0)
        with open(os.path.join(marker_dir, "cache")) as f:
            seen = f.read()
        left = time.time()
    return {"rank": jt.rank(), "entered": entered, "left": left, "seen": seen}


def on_main_calls(marker_dir: str):
    def save(tag):
        with open(os.path.join(marker_dir, f"saved-by-{jt.rank()}"), "w") as f:
            f.write(tag)
        return f"saved {tag}"

    value = jt.on_main(save, "ckpt")
    after = os.path.exists(os.path.join(marker_dir, "saved-by-0"))  # on_main waits for rank 0 to finish
    return {"value": value, "saw_checkpoint": after}


def barrier_order(marker_dir: str):
    if jt.rank() == 1:
        time.sleep(1.0)
        open(os.path.join(marker_dir, "late"), "w").close()
    jt.barrier()
    return os.path.exists(os.path.join(marker_dir, "late"))


def three_reports():
    for i in (1, 2, 3):
        jt.report(step=i, total=3, loss=1.0 / i)
    return "ok"


def test_identity_inside_a_run():
    values = jt.run(identity, n=3, local=True, all_ranks=True)
    assert [v["rank"] for v in values] == [0, 1, 2]
    assert sorted(v["local_rank"] for v in values) == [0, 1, 2]
    assert all(v["world"] == 3 and v["local_world"] == 3 for v in values)
    assert [v["main"] for v in values] == [True, False, False]
    assert all(v["device"] == "cpu" for v in values)


def argv() -> list[str]:
    return list(sys.argv)


def test_every_rank_sees_the_kernels_argv_on_every_backend(backend):
    """Not the Spark worker's (``.../_daemon.py pyspark.worker``) nor the local launcher's (``-c``): the caller's,
    as the cell would see it in the notebook (here pytest's)."""
    assert jt.run(argv, n=2, local=backend == "local", all_ranks=True) == [sys.argv, sys.argv]


def test_main_first_runs_rank_0_to_the_end_before_the_others_start(tmp_path):
    values = jt.run(main_first_order, str(tmp_path), n=3, local=True, all_ranks=True)
    main, others = values[0], values[1:]
    assert main["left"] - main["entered"] >= 1.0
    for v in others:
        assert v["entered"] >= main["left"], f"rank {v['rank']} entered before rank 0 left"
        assert v["seen"] == "built by rank 0"


def test_on_main_runs_once_on_rank_0_and_the_others_wait(tmp_path):
    values = jt.run(on_main_calls, str(tmp_path), n=3, local=True, all_ranks=True)
    assert [v["value"] for v in values] == ["saved ckpt", None, None]
    assert all(v["saw_checkpoint"] for v in values)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["saved-by-0"]


def test_barrier_waits_for_the_slowest_rank(tmp_path):
    assert jt.run(barrier_order, str(tmp_path), n=2, local=True, all_ranks=True) == [True, True]


def test_report_outside_a_run_is_a_no_op_and_inside_reaches_the_view():
    jt.report(step=1, total=2, loss=0.5)  # no run: must not raise
    result = jt.run_detailed(three_reports, n=2, local=True)
    assert result.value == "ok" and [r.step for r in result.state.ranks] == [3, 3]
    assert result.state.ranks[1].metrics["loss"] == pytest.approx(1 / 3)
