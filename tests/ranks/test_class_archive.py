"""The archive of Spark's classes on a real JVM (launchers/session/class_archive.py).

- ``jupyter-torchdist prepare`` leaves this environment's archive ready (CI's ``.ci/run`` runs it first, as a lab's
  image would; here it says so, or builds it), and an embedded session started as a notebook's is (without the
  tests' own JVM options) maps it and runs a job.
- In a fresh environment the first embedded session records its classes and, after its warm-up, starts the builder;
  when that process is killed mid-build (a kernel killed), the builder stops its dump and leaves no half archive.

Each session runs in a subprocess: one Python process holds one JVM.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jupyter_torchdist.launchers.session import class_archive

pytestmark = pytest.mark.spark

SESSION = textwrap.dedent(r"""
    import json, time
    from pyspark import SparkContext
    from jupyter_torchdist.launchers.session import class_archive, embedded

    embedded.warm_up_async().join()
    spark, _ = embedded.get_session()
    total = spark.range(10).selectExpr("sum(id)").collect()[0][0]
    java = SparkContext._gateway.proc.pid  # spark-submit execs spark-class, which execs java
    builder = class_archive._builder.pid if class_archive._builder is not None else None
    print("RESULT " + json.dumps({"total": total, "maps": open(f"/proc/{java}/maps").read(), "builder": builder,
                                 "java": java}),
          flush=True)
    time.sleep(120)
""")


def _start(env: dict[str, str]) -> tuple[subprocess.Popen[str], dict]:
    proc = subprocess.Popen([sys.executable, "-c", SESSION], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "SPARK_SUBMIT_OPTS": "-XX:TieredStopAtLevel=1", **env})
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("RESULT "):
            return proc, json.loads(line[7:])
    proc.wait()
    raise AssertionError(f"the session ended without a result (exit {proc.returncode})")


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def test_prepare_leaves_the_archive_ready_and_an_embedded_session_maps_it() -> None:
    prepared = subprocess.run([sys.executable, "-m", "jupyter_torchdist", "prepare"], capture_output=True, text=True,
                              timeout=600)
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr
    archive = class_archive.current()
    assert archive is not None and archive.ready(), prepared.stdout
    assert str(archive.path) in prepared.stdout
    proc, seen = _start({})
    try:
        assert seen["total"] == 45
        assert str(archive.path) in seen["maps"], "the embedded session's JVM did not map the archive"
        assert seen["builder"] is None
    finally:
        proc.kill()
        proc.wait()
    assert _gone(seen["java"], 30), "the session's JVM outlived its process"


def test_a_first_session_records_and_a_builder_killed_with_its_kernel_leaves_nothing(tmp_path: Path) -> None:
    proc, seen = _start({"XDG_CACHE_HOME": str(tmp_path)})
    builder = seen["builder"]
    archive = class_archive.Archive(class_archive.current().key,  # type: ignore[union-attr]
                                    tmp_path / "jupyter-torchdist" / "jvm")
    try:
        assert seen["total"] == 45 and builder is not None
        assert str(archive.where) not in seen["maps"]
        assert archive.class_list(proc.pid).stat().st_size > 100_000 and archive.layout.exists()
        layout = json.loads(archive.layout.read_text())
        assert "spark-core" in layout["classpath"] and layout["java"].endswith("/bin/java")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert _gone(builder, 15), "the builder outlived its kernel"
    assert _gone(seen["java"], 30), "the session's JVM outlived its kernel"
    dumps = subprocess.run(["pgrep", "-f", f"SharedArchiveFile={archive.path}"], capture_output=True, text=True)
    assert dumps.stdout.strip() == "", "the dump outlived its builder"
    assert not archive.ready()
    left = sorted(p.name for p in archive.where.iterdir())
    assert not [n for n in left if n.endswith((".tmp", ".complete"))], left
    assert archive.class_list(proc.pid).exists(), "the recorded list stays for the next kernel's build"
