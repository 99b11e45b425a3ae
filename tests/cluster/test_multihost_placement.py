"""A cluster of a GPU host and a CPU-only host (issue 21, the seed-001 layout): the ranks take the GPU host's task
slots, the data transform runs on the CPU-only host, and the view shows each rank's input wait. Hosts are network
namespaces (support/hosts.py); the GPU host's worker declares two GPUs with a discovery script (the ranks train on
the CPU: Spark schedules declared GPUs like real ones, which is all placement needs).

Spark places executors of one resource profile only on workers that have its resources, so a session whose
executors ask for GPUs gets none on a CPU-only host; with dynamic allocation the data tasks' own profile (CPUs
only) asks for executors of its own, which the CPU-only host takes.
"""
from __future__ import annotations

import re
import textwrap

import pytest

from ..support.hosts import BRIDGE_IP, bench_available, build, teardown
from ..support.kernel import Kernel

_why = bench_available()
pytestmark = [pytest.mark.spark, pytest.mark.cluster, pytest.mark.slow,
              pytest.mark.skipif(_why is not None, reason=f"multi-host bench: {_why}")]


@pytest.fixture(scope="module")
def gpu_and_cpu_hosts(tmp_path_factory):
    from ..support.cluster import kernel_on

    made = build(tmp_path_factory.mktemp("hosts-gpu-cpu"), hosts=2, cores=2, gpus=(2, 0))
    kernel: Kernel | None = None
    try:
        conf = {"spark.driver.host": BRIDGE_IP, "spark.driver.bindAddress": BRIDGE_IP, "spark.cores.max": "4",
                "spark.executor.cores": "2", "spark.executor.resource.gpu.amount": "2",
                "spark.task.resource.gpu.amount": "1",
                "spark.executor.resource.gpu.discoveryScript": str(made.cluster.workdir / "gpus.sh"),
                "spark.dynamicAllocation.enabled": "true", "spark.dynamicAllocation.shuffleTracking.enabled": "true",
                "spark.dynamicAllocation.minExecutors": "0"}
        kernel = kernel_on(made.cluster, conf, env={"SPARK_LOCAL_IP": BRIDGE_IP})
        yield made, kernel
    finally:
        if kernel is not None:
            kernel.shutdown()
        survivors = teardown(made)
        assert not survivors, survivors


def test_ranks_take_the_gpu_hosts_slots_and_the_transform_runs_on_the_cpu_only_host(gpu_and_cpu_hosts):
    made, kernel = gpu_and_cpu_hosts
    r = kernel.execute(textwrap.dedent("""\
        import socket
        df = spark.range(0, 256, numPartitions=4).selectExpr("id", "cast(id as float) as x")
        def where(pdf):
            import socket, time
            time.sleep(0.05)  # a transform that takes a while: the ranks wait for it
            pdf = pdf.copy(); pdf["host"] = socket.gethostname(); return pdf
    """))
    assert r["status"] == "ok", kernel.text(r)
    r = kernel.execute(textwrap.dedent("""\
        %%distribute -n 2 --all-ranks --data-workers 2
        import socket
        made_on, seen = set(), []
        for batch in jt.batches(df, 8, transform=where):
            made_on |= set(batch["host"]); seen += batch["id"].tolist()
        (socket.gethostname(), sorted(made_on), seen)
    """), timeout=300)
    assert r["status"] == "ok", kernel.text(r) + made.cluster.logs()
    values = eval([o["data"]["text/plain"] for o in r["outputs"] if o["output_type"] == "execute_result"][-1])
    assert [v[0] for v in values] == ["tdh1", "tdh1"], values        # the GPU host
    assert all(v[1] == ["tdh2"] for v in values), values             # the CPU-only host
    assert sorted(sum((v[2] for v in values), [])) == list(range(256))
    waits = kernel.text(kernel.execute("print([r['usage']['input_wait'] for r in jt.last_run().state.snapshot()"
                                       "['ranks']])"))
    assert "None" not in waits and waits.strip().startswith("["), waits
    # the row count and every piece's job share one data profile: one profile more than the session's, so the
    # data executors serve every job (a profile per job waited a minute for the last one's executors to go idle)
    profiles = set(re.findall(r"resourceProfileId\" \"(\d+)", made.cluster.logs()))
    assert profiles == {"0", "1"}, profiles

