"""The Horovod-style rank helpers, inside real runs (real processes, gloo) and outside any run."""
from __future__ import annotations

import os
import sys
import time

import cloudpickle
import pytest

import jupyter_torchdist as jt

cloudpickle.register_pickle_by_value(sys.modules[__name__])

RUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
           "JUPYTER_TORCHDIST_DEVICE")


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


def test_defaults_outside_any_run(monkeypatch):
    for name in RUN_ENV:
        monkeypatch.delenv(name, raising=False)
    assert (jt.rank(), jt.local_rank(), jt.world_size(), jt.local_world_size(), jt.is_main()) == (0, 0, 1, 1, True)
    assert str(jt.device()) == "cpu"  # no LOCAL_RANK: not a launched rank, even on a GPU machine
    jt.barrier()  # no process group: returns at once
    calls = []
    with jt.main_first():
        calls.append("block")
    assert calls == ["block"] and jt.on_main(lambda: "only me") == "only me"


def test_torchrun_style_environment_without_our_runtime(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.delenv("JUPYTER_TORCHDIST_DEVICE", raising=False)
    assert (jt.rank(), jt.local_rank(), jt.world_size(), jt.local_world_size(), jt.is_main()) == (3, 1, 4, 2, False)
    assert jt.on_main(lambda: "never called") is None  # not rank 0, no group to wait on


def _alloc_faults(tune: bool) -> int:
    """Minor page faults of a loop that frees and reallocates 4 MB tensors, in a fresh process that starts as a
    rank forked from a busy worker may: glibc's mmap threshold stuck at its 128 KB default (a process whose
    allocator history pinned it; a fresh one adapts it, or not, depending on what ran before)."""
    import json
    import subprocess
    import sys

    code = ("import ctypes, resource, torch\n"
            "ctypes.CDLL('libc.so.6').mallopt(-3, 128 * 1024)\n"  # M_MMAP_THRESHOLD pinned: no adaptation
            "from jupyter_torchdist.rank.allocator import tune_allocator\n"
            f"assert tune_allocator() if {tune} else True\n"
            "x = torch.ones(1 << 20)\n"
            "for _ in range(20):\n    y = x * 2\n    del y\n"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
            "for _ in range(200):\n    y = x * 2\n    z = y + 1\n    del y, z\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_rank_allocator_reuses_freed_tensor_memory():
    """Fixed malloc thresholds: a loop that frees and reallocates activations does not fault them back in."""
    tuned, untuned = _alloc_faults(tune=True), _alloc_faults(tune=False)
    assert tuned < 5_000 and tuned * 20 < untuned, (tuned, untuned)  # measured: about 1,000 against 400,000
