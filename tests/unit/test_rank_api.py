"""The Horovod-style rank helpers outside any run (their defaults, a torchrun-style environment), and the ranks'
allocator tuning."""
from __future__ import annotations

import sys

import pytest

import jupyter_torchdist as jt

RUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
           "JUPYTER_TORCHDIST_DEVICE")


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


@pytest.mark.slow  # seconds: two fresh interpreters that import torch
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_rank_allocator_reuses_freed_tensor_memory():
    """Fixed malloc thresholds: a loop that frees and reallocates activations does not fault them back in."""
    tuned, untuned = _alloc_faults(tune=True), _alloc_faults(tune=False)
    # Re-faulting every step is about 400,000 faults (200 steps x 2 tensors x 1,024 pages). Tuned, what is left is
    # the heap's first growth: 1 to 5 tensors' worth (1,024 faults each), varying with the heap's layout, which
    # moves with whatever else the process imported (measured 1,033 to 5,129).
    assert tuned < 10_000 and tuned * 40 < untuned, (tuned, untuned)
