"""hvd.init outside our launcher: plain spawned processes with only torchrun's variables form their own group."""
from __future__ import annotations

import os
import signal
import socket
import sys

import cloudpickle
import torch

import jupyter_torchdist.horovod as hvd

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the rank functions below travel by value


def _torchrun_style(index: int, port: int, queue) -> None:
    """A plain spawned process: only the four torchrun variables, no launcher, no process group."""
    import torch.distributed as dist

    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE"):
        os.environ.pop(name, None)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(index), WORLD_SIZE="2")
    hvd.init()
    out = {"rank": hvd.rank(), "size": hvd.size(), "layout": (hvd.local_rank(), hvd.local_size(), hvd.cross_rank(),
                                                               hvd.cross_size()),
           "backend": dist.get_backend(), "sum": hvd.allreduce(torch.tensor([index + 1.0]), op=hvd.Sum).item(),
           "gloo": hvd.gloo_enabled()}
    hvd.shutdown()  # the group is ours here: destroyed
    out["after"] = (hvd.is_initialized(), dist.is_initialized())
    queue.put(out)


def test_init_from_torchrun_style_environment():
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_torchrun_style, args=(port, queue), nprocs=2, join=True)
    results = sorted((queue.get() for _ in range(2)), key=lambda out: out["rank"])
    for r, out in enumerate(results):
        assert out["size"] == 2 and out["backend"] == "gloo" and out["sum"] == 3.0 and out["gloo"]
        assert out["layout"] == (r, 2, 0, 1)  # counted from host names: one host, two ranks
        assert out["after"] == (False, False)


_REINIT = """
import torch
import jupyter_torchdist.horovod as hvd

for cycle in range({cycles}):
    hvd.init()
    total = hvd.allreduce(torch.tensor([hvd.rank() + cycle]), op=hvd.Sum).item()
    assert hvd.is_initialized() and total == sum(range(hvd.size())) + cycle * hvd.size(), total
    hvd.shutdown()
    assert not hvd.is_initialized()
print("cycles done", flush=True)
"""


def test_init_after_shutdown_under_torchrun(tmp_path):
    """Horovod allows init() after shutdown(); under torchrun the store outlives the group, so each init must not
    find the previous group's addresses there (this failed in a third to a half of single re-inits, 3 ranks)."""
    import subprocess

    script = tmp_path / "reinit.py"
    script.write_text(_REINIT.format(cycles=12))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    run = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
                            str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        out, err = run.communicate(timeout=150)
    finally:
        if run.poll() is None:  # hung: torchrun and its ranks go, none left behind
            os.killpg(run.pid, signal.SIGKILL)
            out, err = run.communicate()
    assert run.returncode == 0, out[-3000:] + err[-3000:]
    assert out.count("cycles done") == 3
