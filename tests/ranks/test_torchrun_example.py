"""examples/train_script.py is a real torchrun script: it runs under torch.distributed.run as it is."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from ..support import EXAMPLES

TEARDOWN_ABORT = "terminate called without an active exception"


def _torchrun_example(cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--standalone", str(EXAMPLES / "train_script.py"), "--epochs", "1"],
                          capture_output=True, text=True, timeout=240, cwd=cwd,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


def test_the_example_script_is_a_real_torchrun_script(tmp_path):
    out = _torchrun_example(tmp_path)
    if out.returncode != 0 and TEARDOWN_ABORT in out.stderr and "epoch 1/1" in out.stdout:
        # torch 2.13's gloo sometimes aborts a rank in its own teardown after the script finished
        # (upstream: pytorch/pytorch#179291); nothing in the script can prevent it, so run it once more
        out = _torchrun_example(tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "epoch 1/1" in out.stdout and "world 2" in out.stdout
