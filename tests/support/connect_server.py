"""A real Spark Connect server from the pip pyspark, in its own process (``SparkConnectServer``, local[4]).

Session-scoped: started once, stopped at the end with every process it spawned. Notebooks connect to it with
``SparkSession.builder.remote(url)``: a Connect client in the kernel, as on Databricks or Spark 4's thin client.
The test process itself never becomes a Connect client (that is process-wide in pyspark: the classic tests
beside it would see a remote session), so Connect is used from real kernels only.
"""
from __future__ import annotations

from typing import Any

from .cluster import FAST_JVM, Cluster, _start, _wait_for, spark_env, stop

__all__ = ["start_server", "stop", "SLOTS"]

SLOTS = 4


def start_server(workdir: Any) -> Cluster:
    import time

    (workdir / "local").mkdir(exist_ok=True)
    env = spark_env(workdir)
    confs = {"spark.connect.grpc.binding.port": "0", "spark.connect.grpc.binding.address": "127.0.0.1",
             "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
             "spark.python.daemon.module": "jupyter_torchdist._daemon", "spark.ui.enabled": "false",
             "spark.driver.extraJavaOptions": FAST_JVM, "spark.log.level": "INFO"}
    args = ["--class", "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", f"local[{SLOTS}]",
            *[x for key, value in confs.items() for x in ("--conf", f"{key}={value}")]]
    c = Cluster(url="", workdir=workdir)
    t0 = time.monotonic()
    try:
        # the server is the driver and its executors run the ranks: none of them sees the notebooks' folder
        c.procs.append(_start("org.apache.spark.deploy.SparkSubmit", args, workdir / "connect.log", env,
                              hide=c.notebooks))
        m = _wait_for(workdir / "connect.log", r"Spark Connect server started at: (\S+):(\d+)", c.procs[0],
                      time.monotonic() + 180)
        c.url = f"sc://127.0.0.1:{m[2]}"
    except BaseException:
        stop(c)
        raise
    c.started_in_s = time.monotonic() - t0
    return c
