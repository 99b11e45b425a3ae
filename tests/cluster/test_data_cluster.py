"""batches() on a real standalone cluster on loopback, with GPU scheduling: the ranks take the GPU task slots,
the data workers run in the executors' other slots (a stage-level task profile), the transform in executor JVMs.

Two workers of 2 cores and 1 GPU each (the GPUs are declared by a discovery script: Spark schedules them as
real ones, and the ranks train on the CPU). Without the data job's own task profile, its tasks would ask for
a GPU each and wait forever behind the ranks: the run finishing is the proof that placement works.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

from ..support.cluster import Cluster, alive, session_conf, spark_env, start, stop

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

DRIVER = textwrap.dedent('''
    import json, os, sys
    from pyspark.sql import SparkSession
    import jupyter_torchdist as jt

    builder = SparkSession.builder
    for k, v in json.loads(sys.argv[1]).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    jsc = spark.sparkContext._jsc.sc()
    while jsc.getExecutorMemoryStatus().size() < 3:
        pass

    def executor(pid):
        """The executor id of the executor JVM ``pid`` descends from, or None."""
        while pid > 1:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\\0")
            if any(b"CoarseGrainedExecutorBackend" in part for part in cmd):
                return cmd[cmd.index(b"--executor-id") + 1].decode()
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])

    def tag(pdf):
        pdf = pdf.copy()
        pdf["producer"] = os.getpid()
        return pdf

    def train(df):
        ids, producers = [], set()
        for batch in jt.batches(df, 8, transform=tag):
            ids += batch["id"].tolist()
            producers |= set(batch["producer"].tolist())
        return {"me": executor(os.getpid()), "ids": ids, "producers": sorted({executor(p) for p in producers})}

    df = spark.range(0, 200, numPartitions=4).selectExpr("id", "array(cast(id as float)) as img")
    print("RESULT " + json.dumps(jt.run(train, df, n=2, all_ranks=True, data_workers=2)), flush=True)
    try:
        jt.run(train, df, n=2, local=True)
    except jt.RunFailed as exc:
        print("LOCAL " + json.dumps(str(exc)), flush=True)
    spark.stop()
''')


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory):
    c = start(tmp_path_factory.mktemp("spark-gpu-cluster"), workers=2, cores=2, gpus=1)
    try:
        yield c
    finally:
        survivors = stop(c)
        assert not survivors, f"cluster processes survived the teardown: {survivors}"


def test_ranks_take_the_gpu_slots_and_data_workers_the_others(gpu_cluster: Cluster):
    conf = {**session_conf(gpu_cluster.url), "spark.cores.max": "4", "spark.executor.cores": "2",
            "spark.executor.resource.gpu.amount": "1", "spark.task.resource.gpu.amount": "1",
            "spark.executor.resource.gpu.discoveryScript": str(gpu_cluster.workdir / "gpus.sh")}
    env = {k: v for k, v in spark_env(gpu_cluster.workdir).items()}
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(conf)], capture_output=True, text=True,
                          env=env, timeout=300, stdin=subprocess.DEVNULL)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-5000:] + gpu_cluster.logs()
    ranks = json.loads(lines[0][len("RESULT "):])
    ids = [i for r in ranks for i in r["ids"]]
    assert len(ids) == len(set(ids)) == 192 and set(ids) <= set(range(200)), "each row at most once, 8 left out"
    assert None not in [r["me"] for r in ranks] and len({r["me"] for r in ranks}) == 2, ranks
    producers = {e for r in ranks for e in r["producers"]}
    assert producers and None not in producers, "the transform ran in executor JVMs"
    refused = [ln for ln in done.stdout.splitlines() if ln.startswith("LOCAL ")]
    assert refused and "drop --local" in refused[0], "--local ranks cannot be fed by a cluster's executors"
    assert time.monotonic() - t0 < 240
    own = {p.pid for p in gpu_cluster.procs}
    deadline = time.monotonic() + 30
    while alive(gpu_cluster.family() - own) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(gpu_cluster.family() - own), "executors, Python workers and data tasks ended with the app"
