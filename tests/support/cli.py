"""``python -m jupyter_torchdist`` run as a shell runs it, and the torchrun-style script the CLI tests give it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from . import ROOT

__all__ = ["SCRIPT", "cli", "write_script"]


SCRIPT = '''\
import os, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
if mode == "sleep":
    open(os.path.join(os.path.dirname(os.path.abspath(__file__)), f"pid-{rank}"), "w").write(str(os.getpid()))
    while True:
        time.sleep(0.05)
if mode == "raise" and rank == 1:
    raise ValueError("bad batch on rank one")
t = torch.ones(1)
dist.all_reduce(t)
print(f"hello from {rank} of {dist.get_world_size()} sum={t.item()} args={sys.argv[1:]}")
'''


def write_script(folder: Path) -> Path:
    """SCRIPT as ``folder/train.py`` (its sleeping ranks leave their pids beside it)."""
    path = folder / "train.py"
    path.write_text(SCRIPT)
    return path


def cli(*args: str, timeout: float = 120, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jupyter_torchdist", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=dict(os.environ, PYTHONPATH=str(ROOT)))
