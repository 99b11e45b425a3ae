"""python -m jupyter_torchdist before any rank starts: help, usage errors (exit 2, no traceback), and horovodrun's
spelling translated or refused."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from .. import support
from ..support.cli import cli, write_script

ROOT = str(support.ROOT)


@pytest.fixture
def script(tmp_path):
    return write_script(tmp_path)


@pytest.mark.parametrize("args, message", [
    ((), "no script given: python -m jupyter_torchdist -n 2 train.py ARGS"),
    (("-n", "0", "x.py"), "-n/--nprocs must be a whole number of ranks >= 1"),
    (("-n", "1", "--local", "does-not-exist.py"), "cannot read the script"),
])
def test_bad_arguments_exit_2_with_a_short_message(args, message):
    out = cli(*args)
    assert out.returncode == 2 and message in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.slow  # seconds: the command line in a fresh process
def test_gpu_without_gpus_exits_2(script):
    out = subprocess.run([sys.executable, "-m", "jupyter_torchdist", "-n", "1", "--local", "--gpu", str(script)],
                         capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES=""))
    assert out.returncode == 2 and "--gpu" in out.stderr and "Traceback" not in out.stderr


def test_help_names_every_option():
    out = cli("--help")
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
    from jupyter_torchdist.core.options import CLI_PROG, MAGIC_PROG, options_help

    out = cli("--help")
    assert out.stdout.strip() == options_help(CLI_PROG).strip()
    def body(text: str) -> str:  # everything after the usage lines (wrapped to the program's name)
        return text.split("\n\n", 1)[1]

    assert body(options_help(CLI_PROG)) == body(options_help(MAGIC_PROG))


def test_cell_only_options_are_refused_on_the_command_line():
    out = cli("-n", "1", "--local", "-o", "x", "train.py")
    assert out.returncode == 2 and "-o/--output only mean something for a notebook cell" in out.stderr


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
    (["-np", "2", "--min-np", "1", "--max-np", "4", "--reset-limit", "3", "python", "t.py"],
     ["-n", "2", "--max-restarts", "3", "t.py"]),  # horovodrun elastic: every rank restarted, on the same N
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
    (["-np", "4", "--max-np", "2", "t.py"], "-np 4 is outside --min-np - .. --max-np 2"),
    (["-np", "2", "--min-np", "x", "t.py"], "--min-np needs a whole number"),
    (["-np", "2", "--host-discovery-script", "d.sh", "t.py"], "On a real cluster"),
])
def test_horovodrun_spelling_without_meaning_here_is_a_usage_error(argv, message):
    from jupyter_torchdist.__main__ import from_horovodrun
    from jupyter_torchdist.core.errors import OptionsError

    with pytest.raises(OptionsError, match=re.escape(message)):
        from_horovodrun(argv)


def test_several_hosts_exit_2_pointing_at_a_spark_cluster():
    out = cli("-np", "4", "-H", "server1:2,server2:2", "python", "train.py")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "Spark cluster" in out.stderr and "docs/user-guide/clusters.md" in out.stderr
