"""--local only: rank processes forked from a zygote of the kernel, what each run takes from the kernel, a dead
zygote, GPUs refused without GPUs, and no Spark at all (the launchers' shared behaviours are in test_run.py)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import cloudpickle
import pytest
import torch

import jupyter_torchdist as jt
from jupyter_torchdist.core.errors import LaunchError, RunFailed
from jupyter_torchdist.launchers import local_server as local

from .. import support
from ..support import helpers
from ..support.procs import all_gone, descendants_of

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the rank functions below travel by value
ROOT = str(support.ROOT)


def _marker_pids(marker_dir) -> list[int]:
    return [int(p.read_text()) for p in marker_dir.glob("pid-*")]


def whoami(tag: str) -> dict:
    import importlib

    return {"pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(), "tag": os.environ.get("JTD_TEST_TAG"),
            "module": importlib.import_module("jtd_local_sibling").VALUE, "arg": tag}


def test_the_ranks_are_forked_from_a_zygote_the_kernel_started():
    pids = jt.run(os.getpid, n=3, local=True, all_ranks=True)
    assert len(set(pids)) == 3 and os.getpid() not in pids
    zygote = local.zygote_pid()
    assert zygote is not None and zygote in descendants_of(os.getpid())


def test_each_run_takes_the_kernels_cwd_path_and_environment(tmp_path, monkeypatch):
    (tmp_path / "jtd_local_sibling.py").write_text("VALUE = 'imported from the kernel path'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JTD_TEST_TAG", "set after the zygote started")
    jt.run(os.getpid, n=1, local=True)  # the zygote exists before the changes below matter
    value = jt.run(whoami, "x", n=2, local=True)
    assert value["cwd"] == str(tmp_path)
    assert value["tag"] == "set after the zygote started"
    assert value["module"] == "imported from the kernel path" and value["arg"] == "x"


@pytest.mark.skipif(torch.version.cuda is not None, reason="needs the CPU build of torch")
def test_gpu_is_refused_clearly_with_a_cpu_only_torch(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(LaunchError, match="CPU-only build"):
        jt.run(os.getpid, n=1, local=True, gpu=True)


def test_a_dead_zygote_fails_the_run_and_the_next_run_starts_a_new_one(tmp_path):
    jt.run(os.getpid, n=1, local=True)
    zygote = local.zygote_pid()
    assert zygote is not None

    def kill_when_ranks_run() -> None:
        end = time.monotonic() + 30
        while len(_marker_pids(tmp_path)) < 2 and time.monotonic() < end:
            time.sleep(0.05)
        os.kill(zygote, signal.SIGKILL)

    killer = threading.Thread(target=kill_when_ranks_run)
    killer.start()
    with pytest.raises(RunFailed):
        jt.run(helpers.sleep_forever, str(tmp_path), n=2, local=True, timeout=60)
    killer.join()
    assert all_gone(_marker_pids(tmp_path)), "ranks outlived their zygote"
    assert jt.run(os.getpid, n=1, local=True) != zygote and local.zygote_pid() not in (None, zygote)


def _python(code: str, cwd: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_fresh_interpreter_never_imports_pyspark(tmp_path):
    out = _python("""
        import sys
        import jupyter_torchdist as jt

        def total():
            import torch, torch.distributed as dist
            t = torch.ones(1) * (dist.get_rank() + 1)
            dist.all_reduce(t)
            return t.item()

        assert jt.run(total, n=2, local=True) == 3.0
        try:
            jt.run(lambda: 1 / 0, n=2, local=True)
        except jt.RunFailed as exc:
            assert "ZeroDivisionError" in str(exc)
        print("pyspark imported:", "pyspark" in sys.modules, "py4j imported:", "py4j" in sys.modules)
    """, str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "pyspark imported: False py4j imported: False" in out.stdout


def test_a_script_without_a_main_guard_is_not_run_again_by_the_ranks(tmp_path):
    """multiprocessing's spawn and forkserver would re-run this file in every child; we must not."""
    (tmp_path / "launch.py").write_text(textwrap.dedent("""
        import os
        import jupyter_torchdist as jt
        with open("top-level-runs.txt", "a") as f:
            f.write(f"{os.getpid()}\\n")
        print("value", jt.run(lambda: 40 + 2, n=2, local=True))
    """))
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "launch.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stderr
    assert "value 42" in out.stdout
    assert len((tmp_path / "top-level-runs.txt").read_text().split()) == 1


def test_killing_the_kernel_takes_zygote_agents_and_ranks_with_it(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, time
        import jupyter_torchdist as jt

        def forever(d):
            import torch.distributed as dist
            with open(os.path.join(d, f"pid-{{dist.get_rank()}}"), "w") as f:
                f.write(str(os.getpid()))
            while True:
                time.sleep(0.05)

        jt.run(forever, {str(tmp_path)!r}, n=2, local=True)
    """)], env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        end = time.monotonic() + 180
        while len(_marker_pids(tmp_path)) < 2 and time.monotonic() < end and proc.poll() is None:
            time.sleep(0.05)
        family = descendants_of(proc.pid)
        ranks = _marker_pids(tmp_path)
        assert len(ranks) == 2 and set(ranks) <= family
    finally:
        proc.kill()
        proc.wait()
    assert all_gone(sorted(family), 30), "processes outlived the kernel that started them"
