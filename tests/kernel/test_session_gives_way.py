"""%load_ext starts the embedded session in the background; a session the notebook builds in a later cell is still
the one it asked for (issue 26, item 1): the embedded session gives way, saying so, unless kept ranks run on it."""
from __future__ import annotations

import pytest

from ..support.kernel import loaded_kernel

pytestmark = pytest.mark.spark

BUILD = ("from pyspark.sql import SparkSession\n"
         "spark = SparkSession.builder.master('local[3]').appName('mine').config('spark.driver.memory', '2g')"
         ".getOrCreate()\n"
         "print(spark.sparkContext.master, spark.sparkContext.appName)")


def test_the_notebooks_own_session_is_the_one_it_asked_for():
    with loaded_kernel(extra_env={"JUPYTER_TORCHDIST_WARMUP": "1"}) as k:
        r = k.execute("import jupyter_torchdist as jt\nprint(jt.spark_session().sparkContext.master)")
        assert "local[256]" in k.text(r)  # the embedded session, started when asked for

        r = k.execute("%%distribute --keep -n 2\nx = 1")
        assert r["status"] == "ok", k.text(r)
        r = k.execute(BUILD)
        text = k.text(r)
        assert "kept ranks run on the embedded local session" in text and "%distribute_stop" in text
        assert "local[256]" in text  # pyspark's own rule: the existing context, said plainly

        k.execute("%distribute_stop")
        r = k.execute(BUILD)
        text = k.text(r)
        assert r["status"] == "ok", text
        assert "local[3] mine" in text and "stopped its embedded local Spark session" in text
        assert "spark.driver.memory cannot apply" in text  # a JVM setting that came too late is said, not lost

        r = k.execute("%%distribute -n 2\nimport torch.distributed as dist\ndist.get_world_size()")
        assert r["status"] == "ok", k.text(r)
        backend = k.text(k.execute("import jupyter_torchdist as jt\nprint(jt.last_run().state.backend)"))
        assert "local[3]" in backend and "embedded" not in backend

        r = k.execute("%%distribute -n 4 --wait 0\n1")
        text = k.text(r)
        assert r["status"] == "error" and "(local[3]) has 3" in text and "local[N]" in text
        assert "JUPYTER_TORCHDIST_SPARK_SLOTS" not in text  # advice for the user's session, not the embedded one
