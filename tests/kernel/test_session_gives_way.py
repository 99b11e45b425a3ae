"""%load_ext starts the embedded session in the background; a session the notebook builds in a later cell is exactly
the one it would build without the extension (issues 26 and 42): compared key by key with the same builder in a
kernel without the extension (settings, JVM heap, jars on the driver, the kernel's environment); the embedded
session and its JVM give way, saying so, unless kept ranks run on it; background runs are waited for first."""
from __future__ import annotations

import ast
import zipfile

import pytest

from ..support.kernel import Kernel, loaded_kernel

pytestmark = pytest.mark.spark

# Spark's own values that differ from one start to the next
VOLATILE = {"spark.app.id", "spark.app.startTime", "spark.app.submitTime", "spark.driver.port",
            "spark.sql.warehouse.dir", "spark.repl.local.jars", "spark.app.initial.jar.urls"}


def build(jar: str) -> str:
    return ("from pyspark.sql import SparkSession\n"
            "spark = SparkSession.builder.master('local[3]').appName('mine').config('spark.driver.memory', '1300m')"
            f".config('spark.jars', {jar!r}).getOrCreate()\n"
            "print(spark.sparkContext.master, spark.sparkContext.appName)")


DUMP = """\
import os
_jvm = spark.sparkContext._jvm
_loader = _jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
print(repr({"conf": {k: v for k, v in spark.sparkContext.getConf().getAll()},
            "heap_mb": _jvm.java.lang.Runtime.getRuntime().maxMemory() // 2**20,
            "jar_on_driver": _loader.getResource("jtd-marker.txt") is not None,
            "env": {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "SPARK_LOCAL_IP")}}))
"""


@pytest.fixture(scope="module")
def jar(tmp_path_factory) -> str:
    """A local jar holding one resource, to see whether spark.jars reached the driver's class path."""
    path = tmp_path_factory.mktemp("jars") / "marker.jar"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        z.writestr("jtd-marker.txt", "here")
    return str(path)


def _dump(k: Kernel) -> dict:
    r = k.execute(DUMP)
    assert r["status"] == "ok", k.text(r)
    return ast.literal_eval(k.text(r).strip().splitlines()[-1])


@pytest.fixture(scope="module")
def without_extension(jar) -> dict:
    k = Kernel()
    try:
        r = k.execute(build(jar), timeout=120)
        assert r["status"] == "ok", k.text(r)
        return _dump(k)
    finally:
        k.shutdown()


def test_the_notebooks_own_session_is_the_one_it_would_build_without_the_extension(without_extension, jar):
    with loaded_kernel(extra_env={"JUPYTER_TORCHDIST_WARMUP": "1"}) as k:
        r = k.execute("import jupyter_torchdist as jt\nprint(jt.spark_session().sparkContext.master)")
        assert "local[256]" in k.text(r)  # the embedded session, started when asked for
        r = k.execute("%%distribute -n 2\nimport torch.distributed as dist\ndist.get_world_size()")
        assert r["status"] == "ok" and "(embedded)" in k.text(k.execute("print(jt.last_run().state.backend)"))
        active = k.text(k.execute("from pyspark.sql import SparkSession\n"
                                  "print(SparkSession.getActiveSession().sparkContext.master)"))
        assert "local[256]" in active, "the session the runs used is the notebook's active session"
        env = k.text(k.execute("import os\nprint(os.environ.get('PYSPARK_PYTHON'), os.environ.get('SPARK_LOCAL_IP'))"))
        assert env.strip() == "None None", "the embedded session leaves the kernel's environment alone"

        r = k.execute("%%distribute --keep -n 2\nx = 1")
        assert r["status"] == "ok", k.text(r)
        text = k.text(k.execute(build(jar)))
        assert "kept ranks run on the embedded local session" in text and "%distribute_stop" in text
        assert "local[256]" in text  # pyspark's own rule: the existing context, said plainly
        k.execute("%distribute_stop")

        r = k.execute("%%distribute -n 2 --background\nimport time\ntime.sleep(4)\n'finished'")
        assert r["status"] == "ok", k.text(r)
        r = k.execute(build(jar) + "\nprint(jt.runs()[-1].state, jt.runs()[-1].result())", timeout=120)
        text = k.text(r)
        assert r["status"] == "ok", text
        assert "waiting for run" in text and "done finished" in text, "the background run ended first"
        assert "local[3] mine" in text and "stopped its embedded local Spark session and its JVM" in text
        ours = _dump(k)

        r = k.execute("%%distribute -n 2\nimport torch.distributed as dist\ndist.get_world_size()")
        assert r["status"] == "ok", k.text(r)
        backend = k.text(k.execute("print(jt.last_run().state.backend)"))
        assert "local[3]" in backend and "embedded" not in backend
        r = k.execute("%%distribute -n 4 --wait 0\n1")
        text = k.text(r)
        assert r["status"] == "error" and "(local[3]) has 3" in text and "local[N]" in text
        assert "JUPYTER_TORCHDIST_SPARK_SLOTS" not in text  # advice for the user's session, not the embedded one
    theirs = without_extension
    assert {key: value for key, value in ours["conf"].items() if key not in VOLATILE} == \
        {key: value for key, value in theirs["conf"].items() if key not in VOLATILE}
    assert ours["heap_mb"] == theirs["heap_mb"] and ours["heap_mb"] < 1400, "spark.driver.memory applied"
    assert ours["jar_on_driver"] and theirs["jar_on_driver"], "spark.jars reached the driver's class path"
    assert ours["env"] == theirs["env"]
