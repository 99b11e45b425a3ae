"""Light, predictable notebooks (teaching servers, laptops), in real kernels as a user gets them (the warm-up on):
a --local-only notebook starts no JVM; an idle notebook gives its process server and idle Spark workers back and
takes them back when used again; without Java every cell runs on local processes with one notice; a builder
with nothing of its own gets the embedded session whenever it runs."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from ..support.kernel import Kernel, loaded_kernel
from ..support.procs import descendants_of

CELL = ("%%distribute -n 2{flags}\nimport torch, torch.distributed as dist\nt = torch.ones(1)\ndist.all_reduce(t)\n"
        "t.item()")
JVM = "org.apache.spark"


def _cmdlines(pid: int) -> list[str]:
    out = []
    for child in descendants_of(pid):
        try:
            out.append(Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            pass
    return out


def _ok(k: Kernel, code: str, timeout: float = 240) -> str:
    r = k.execute(code, timeout=timeout)
    assert r["status"] == "ok", k.text(r)
    return k.text(r)


def _until(check, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def test_a_local_only_notebook_starts_no_jvm_and_gives_its_process_server_back_when_idle():
    env = {"JUPYTER_TORCHDIST_WARMUP": "1", "JUPYTER_TORCHDIST_IDLE_S": "3"}
    with loaded_kernel(env) as k:
        for _ in range(2):
            assert "2.0" in _ok(k, CELL.format(flags=" --local"))
        zygote = _ok(k, "from jupyter_torchdist.launchers.local_server import zygote_pid\nprint(zygote_pid())").strip()
        assert zygote != "None" and not any(JVM in c for c in _cmdlines(k.pid)), "a --local notebook started a JVM"
        assert _until(lambda: not os.path.exists(f"/proc/{zygote}"), 30), "the idle release kept the process server"
        assert "2.0" in _ok(k, CELL.format(flags=" --local"))  # it comes back for the next run
        assert not any(JVM in c for c in _cmdlines(k.pid))


@pytest.mark.spark
def test_an_idle_notebook_gives_idle_spark_workers_back_and_the_next_runs_are_fast_again():
    env = {"JUPYTER_TORCHDIST_WARMUP": "1", "JUPYTER_TORCHDIST_IDLE_S": "4"}
    with loaded_kernel(env, setup="import jupyter_torchdist as jt\njt.spark_session()") as k:
        for _ in range(2):
            _ok(k, CELL.format(flags=""))
        assert "(embedded)" in _ok(k, "print(jt.last_run().state.backend)")
        workers = lambda: sum("-m jupyter_torchdist._daemon" in c for c in _cmdlines(k.pid))
        assert workers() >= 2  # the daemon and its warm workers
        assert _until(lambda: workers() == 1, 40), "only the daemon stays after the idle release"
        first = k.execute(CELL.format(flags=""), timeout=120)
        assert first["status"] == "ok" and "2.0" in k.text(first)
        assert "(embedded)" in _ok(k, "print(jt.last_run().state.backend)")
        assert workers() >= 2


def test_without_java_every_cell_runs_on_local_processes_and_says_why_once(tmp_path):
    bin_dir = tmp_path / "bin"  # a PATH with this Python and nothing else: no java
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    env = {"JUPYTER_TORCHDIST_WARMUP": "1", "PATH": str(bin_dir), "JAVA_HOME": None}
    k = Kernel(env)
    try:
        assert k.execute("%load_ext jupyter_torchdist\nimport jupyter_torchdist as jt")["status"] == "ok"
        said = []
        for wait in (0, 6, 0):
            time.sleep(wait)
            r = k.execute(CELL.format(flags=""), timeout=120)
            assert r["status"] == "ok" and "2.0" in k.text(r), k.text(r)
            said.append(k.text(r).count("no Java found"))
            assert _ok(k, "print(jt.last_run().state.backend)").strip() == "local processes (no Java here for Spark)"
        assert said == [1, 0, 0]
        r = k.execute("from jupyter_torchdist import TorchDistributor\n"
                      "TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(len, [])", timeout=120)
        assert r["status"] == "error" and "Java" in k.text(r)  # Spark tasks need Java: said, not hung
    finally:
        pid = k.pid
        k.shutdown()
    assert pid is None or not descendants_of(pid)


@pytest.mark.spark
@pytest.mark.parametrize("moment", ["with %load_ext", "while it starts"])
def test_a_builder_asking_for_nothing_gets_the_embedded_session_whenever_it_runs(moment):
    builder = ("from pyspark.sql import SparkSession\n"
               "spark = SparkSession.builder.appName('class').config('spark.sql.shuffle.partitions', '3')"
               ".getOrCreate()\n"
               "print(spark.sparkContext.master, spark is SparkSession.getActiveSession(), spark is jt.spark_session(),"
               " spark.conf.get('spark.sql.shuffle.partitions'))")
    with loaded_kernel({"JUPYTER_TORCHDIST_WARMUP": "1"}, setup="import jupyter_torchdist as jt") as k:
        if moment == "while it starts":
            _ok(k, CELL.format(flags=""))  # the first cell: it starts the embedded session, running locally meanwhile
            assert _ok(k, "print(jt.last_run().state.backend)").startswith("local processes")
        said = _ok(k, builder)
        assert said.split() == ["local[256]", "True", "True", "3"], said
        assert "2.0" in _ok(k, "%%distribute -n 4\nimport torch, torch.distributed as dist\nt = torch.ones(1)\n"
                               "dist.all_reduce(t)\nt.item() / 2")  # 4 ranks fit: not a local[*] of 2 slots
        again = _ok(k, "print(SparkSession.builder.getOrCreate() is spark, spark.range(5).count())")
        assert again.split() == ["True", "5"]
