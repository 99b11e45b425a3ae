"""DeepSpeed's CPU backend compiles a shared-memory communication op the first time a process group uses it (about a
minute, with the machine's C++ compiler, cached under ~/.cache/torch_extensions). Tests build it once in one process
before their ranks start, so that two ranks never race to compile it on a fresh machine."""
from __future__ import annotations

import subprocess
import sys

_BUILD = ("from deepspeed.comm.torch import build_shm_op\n"
          "build_shm_op()\n")


def build_deepspeed_cpu_ops() -> None:
    done = subprocess.run([sys.executable, "-c", _BUILD], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"building DeepSpeed's CPU op failed:\n{done.stderr[-4000:]}"
