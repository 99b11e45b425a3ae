"""python -m jupyter_torchdist: real subprocesses, real ranks; exit status and root cause as a shell sees them."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from .. import support
from ..support.cli import cli, write_script
from ..support.procs import descendants_of

ROOT = str(support.ROOT)


@pytest.fixture
def script(tmp_path):
    return write_script(tmp_path)


def test_success_prints_each_ranks_output_and_exits_0(script):
    out = cli("-n", "2", "--local", str(script), "ok", "--lr", "0.01")
    assert out.returncode == 0, out.stderr
    assert "[rank 0] hello from 0 of 2 sum=2.0 args=['ok', '--lr', '0.01']" in out.stdout
    assert "[rank 1] hello from 1 of 2 sum=2.0 args=['ok', '--lr', '0.01']" in out.stdout
    assert "SUCCEEDED" in out.stdout


def test_failure_exits_1_with_the_root_cause_on_stderr(script):
    out = cli("-n", "2", "--local", str(script), "raise")
    assert out.returncode == 1
    assert "rank 1" in out.stderr and "ValueError: bad batch on rank one" in out.stderr
    assert "root cause" in out.stderr and 'train.py", line 11' in out.stderr
    assert "\x1b[" not in out.stderr  # no colour codes when stderr is not a terminal


def _watch_family(proc: subprocess.Popen) -> set[int]:
    """Every process the CLI had started, gathered while it runs (its tree is gone once it exits)."""
    family: set[int] = set()
    while proc.poll() is None:
        family |= descendants_of(proc.pid)
        time.sleep(0.05)
    return family


def _alive(pids) -> list[int]:
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(pid)
        except OSError:
            pass
    return alive


def test_timeout_exits_124_and_leaves_no_process(script, tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "jupyter_torchdist", "-n", "2", "--local", "--timeout", "15",
                             str(script), "sleep"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        family = _watch_family(proc)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 124, err
    assert "timed out after 15 s" in err  # 15 s: both ranks are up well before it, on a loaded CI machine too
    ranks = [int(p.read_text()) for p in tmp_path.glob("pid-*")]
    assert len(ranks) == 2 and set(ranks) <= family and len(family) >= 3  # zygote, agents, ranks were all seen
    deadline = time.monotonic() + 10
    while _alive(family) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(family), "processes outlived the command"


def test_ctrl_c_exits_130_and_stops_every_rank(script, tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "jupyter_torchdist", "-n", "2", "--local", str(script), "sleep"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        end = time.monotonic() + 120
        while not all((tmp_path / f"pid-{r}").exists() for r in (0, 1)) and time.monotonic() < end:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C in a terminal sends
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    pids = [int((tmp_path / f"pid-{r}").read_text()) for r in (0, 1)]
    assert not _alive(pids)


@pytest.mark.spark
def test_spark_backend_by_default(script):
    out = cli("-n", "2", str(script), timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "on spark local[" in out.stdout and "[rank 1] hello from 1 of 2 sum=2.0" in out.stdout


@pytest.mark.spark
def test_horovod_script_under_horovodrun_spelling(tmp_path):
    """examples/horovod_train.py as horovodrun would be told to run it; the default (embedded Spark) backend."""
    import torch

    checkpoint = tmp_path / "checkpoint.pt"
    out = cli("-np", "2", "-H", "localhost:2", "python", os.path.join(ROOT, "examples", "horovod_train.py"),
               "--epochs", "1", "--no-cuda", "--checkpoint", str(checkpoint), timeout=240, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "on spark local[" in out.stdout and "[rank 0] epoch 1: test loss" in out.stdout
    assert "(size 2, local size 2)" in out.stdout
    saved = torch.load(checkpoint)
    assert saved["epoch"] == 1 and len(saved["losses"]) == 16 and set(saved["model"]) >= {"conv1.weight", "fc2.bias"}


def test_a_tracked_script_has_its_record_written_before_the_command_exits(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    script = tmp_path / "report.py"
    script.write_text("import jupyter_torchdist as jt\n"
                      "for step in range(5):\n    jt.report(step=step, loss=1.0 / (step + 1))\n")
    done = subprocess.run([sys.executable, "-m", "jupyter_torchdist", "-n", "2", "--local", "--track", "tensorboard",
                           "--logdir", str(tmp_path / "runs"), str(script)], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=ROOT, XDG_CACHE_HOME=str(tmp_path / "cache")))
    assert done.returncode == 0, done.stderr
    [folder] = (tmp_path / "runs").iterdir()
    events = EventAccumulator(str(folder))
    events.Reload()
    assert [e.step for e in events.Scalars("loss")] == [0, 1, 2, 3, 4]
