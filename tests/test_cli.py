"""python -m jupyter_torchdist: real subprocesses, real ranks; exit status and root cause as a shell sees them."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from .conftest import descendants_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


def _cli(*args: str, timeout: float = 120, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jupyter_torchdist", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=dict(os.environ, PYTHONPATH=ROOT))


def test_success_prints_each_ranks_output_and_exits_0(script):
    out = _cli("-n", "2", "--local", str(script), "ok", "--lr", "0.01")
    assert out.returncode == 0, out.stderr
    assert "[rank 0] hello from 0 of 2 sum=2.0 args=['ok', '--lr', '0.01']" in out.stdout
    assert "[rank 1] hello from 1 of 2 sum=2.0 args=['ok', '--lr', '0.01']" in out.stdout
    assert "SUCCEEDED" in out.stdout


def test_failure_exits_1_with_the_root_cause_on_stderr(script):
    out = _cli("-n", "2", "--local", str(script), "raise")
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
    proc = subprocess.Popen([sys.executable, "-m", "jupyter_torchdist", "-n", "2", "--local", "--timeout", "6",
                             str(script), "sleep"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        family = _watch_family(proc)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 124, err
    assert "timed out after 6 s" in err
    ranks = [int(p.read_text()) for p in tmp_path.glob("pid-*")]
    assert set(ranks) <= family and len(family) >= 3  # zygote, agents, ranks were all seen
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


@pytest.mark.parametrize("args, message", [
    ((), "no script given: python -m jupyter_torchdist -n 2 train.py ARGS"),
    (("-n", "0", "x.py"), "-n/--nprocs must be a whole number of ranks >= 1"),
    (("-n", "1", "--local", "does-not-exist.py"), "cannot read the script"),
])
def test_bad_arguments_exit_2_with_a_short_message(args, message):
    out = _cli(*args)
    assert out.returncode == 2 and message in out.stderr
    assert "Traceback" not in out.stderr


def test_gpu_without_gpus_exits_2(script):
    out = subprocess.run([sys.executable, "-m", "jupyter_torchdist", "-n", "1", "--local", "--gpu", str(script)],
                         capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES=""))
    assert out.returncode == 2 and "--gpu" in out.stderr and "Traceback" not in out.stderr


def test_help_names_every_option():
    out = _cli("--help")
    assert out.returncode == 0
    for flag in ("-n", "--local", "--gpu", "--timeout", "--threads", "--quiet", "--data-workers"):
        assert flag in out.stdout


def test_help_after_an_option_value_is_still_help_but_after_the_script_it_is_the_scripts():
    from jupyter_torchdist.__main__ import _wants_help

    for argv in (["-n", "2", "--help"], ["-np", "2", "-h"], ["--timeout=5", "--help"], ["--local", "-h"]):
        assert _wants_help(argv), argv
    for argv in (["-n", "2", "train.py", "--help"], ["train.py", "-h"], ["-np", "2", "python", "t.py", "-h"]):
        assert not _wants_help(argv), argv


def test_one_option_set_for_the_command_line_and_the_magic():
    """The command line parses with the magic's parser: same options, same help text (only its name differs)."""
    from jupyter_torchdist.options import CLI_PROG, MAGIC_PROG, options_help

    out = _cli("--help")
    assert out.stdout.strip() == options_help(CLI_PROG).strip()
    def body(text: str) -> str:  # everything after the usage lines (wrapped to the program's name)
        return text.split("\n\n", 1)[1]

    assert body(options_help(CLI_PROG)) == body(options_help(MAGIC_PROG))


def test_cell_only_options_are_refused_on_the_command_line():
    out = _cli("-n", "1", "--local", "-o", "x", "train.py")
    assert out.returncode == 2 and "-o/--output only mean something for a notebook cell" in out.stderr


@pytest.mark.spark
def test_spark_backend_by_default(script):
    out = _cli("-n", "2", str(script), timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "on spark local[" in out.stdout and "[rank 1] hello from 1 of 2 sum=2.0" in out.stdout


# ------------------------------------------------------------------------------- horovodrun's spelling

@pytest.mark.parametrize("argv, ours", [
    (["-np", "4", "-H", "localhost:4", "python", "train.py", "--lr", "0.1"], ["-n", "4", "train.py", "--lr", "0.1"]),
    (["-np", "4", "train.py"], ["-n", "4", "train.py"]),
    (["-np=2", "python3", "train.py"], ["-n", "2", "train.py"]),
    (["--num-proc", "2", sys.executable, "train.py"], ["-n", "2", "train.py"]),
    (["--local", "-np", "2", "--gloo", "python3.11", "t.py", "-np", "x", "python"],
     ["--local", "-n", "2", "t.py", "-np", "x", "python"]),  # after the script, everything is the script's
    (["-H", "localhost:3", "--timeout", "9", "t.py"], ["--timeout", "9", "-n", "3", "t.py"]),
    (["-np", "2", "-H", "127.0.0.1", "t.py"], ["-n", "2", "t.py"]),
    (["-n", "2", "--quiet", "t.py", "a"], ["-n", "2", "--quiet", "t.py", "a"]),  # ours, unchanged
])
def test_horovodrun_spelling_becomes_ours(argv, ours):
    from jupyter_torchdist.__main__ import from_horovodrun

    assert from_horovodrun(argv) == ours


@pytest.mark.parametrize("argv, message", [
    (["-np", "4", "-H", "a:2,b:2", "python", "t.py"], "names 2 hosts"),
    (["-np", "2", "-H", "gpu-node-7:2", "t.py"], "gpu-node-7 is not this machine"),
    (["-np", "2", "--hostfile", "hosts.txt", "t.py"], "On a real cluster"),
    (["-np", "2", "--mpi", "t.py"], "MPI is not used"),
    (["-np", "2", "--fusion-threshold-mb", "32", "t.py"], "Horovod's own runtime"),
    (["-np", "4", "-H", "localhost:2", "t.py"], "-np 4 needs 4 slots, but -H localhost:2 gives 2"),
    (["-np", "2", "python", "-m", "train"], "only a script runs here"),
    (["-np"], "-np needs a number of ranks"),
])
def test_horovodrun_spelling_without_meaning_here_is_a_usage_error(argv, message):
    from jupyter_torchdist.__main__ import from_horovodrun
    from jupyter_torchdist.errors import OptionsError

    with pytest.raises(OptionsError, match=re.escape(message)):
        from_horovodrun(argv)


def test_several_hosts_exit_2_pointing_at_a_spark_cluster():
    out = _cli("-np", "4", "-H", "server1:2,server2:2", "python", "train.py")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "Spark cluster" in out.stderr and 'README: "On a real cluster"' in out.stderr


@pytest.mark.spark
def test_horovod_script_under_horovodrun_spelling(tmp_path):
    """examples/horovod_train.py as horovodrun would be told to run it; the default (embedded Spark) backend."""
    import torch

    checkpoint = tmp_path / "checkpoint.pt"
    out = _cli("-np", "2", "-H", "localhost:2", "python", os.path.join(ROOT, "examples", "horovod_train.py"),
               "--epochs", "1", "--no-cuda", "--checkpoint", str(checkpoint), timeout=240, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "on spark local[" in out.stdout and "[rank 0] epoch 1: test loss" in out.stdout
    assert "(size 2, local size 2)" in out.stdout
    saved = torch.load(checkpoint)
    assert saved["epoch"] == 1 and len(saved["losses"]) == 16 and set(saved["model"]) >= {"conv1.weight", "fc2.bias"}
