"""A real multi-JVM cluster: a cell, a script, TorchDistributor and debugging, in one real kernel, on standalone Spark.

One Python process can hold only one SparkContext (this test process holds the embedded local
one), so the cluster's driver is a real IPython kernel; all scenarios share it and the cluster.
"""
from __future__ import annotations

import re
import textwrap
import time

import pytest

from ..support.cluster import Cluster, alive, session_conf, spark_env
from ..support.procs import descendants_of
from ..kernel.test_debug_kernel import BREAK, HANG
from ..support.kernel import Kernel

pytestmark = [pytest.mark.spark, pytest.mark.cluster]


WHERE = '''
import os, time

def executor_jvm():
    """(pid, executor id) of the executor JVM this process descends from."""
    pid = os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().split(b"\\0")
        if any(b"CoarseGrainedExecutorBackend" in part for part in cmd):
            return pid, cmd[cmd.index(b"--executor-id") + 1].decode()
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    return None
'''

SCRIPT = '''\
import os, sys
import torch, torch.distributed as dist
from where_helpers import executor_jvm
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
print(f"script rank={dist.get_rank()} sum={t.item()} jvm={executor_jvm()} args={sys.argv[1:]}")
'''


def _ok(kernel: Kernel, code: str, timeout: float = 240) -> dict:
    r = kernel.execute(code, timeout=timeout)
    assert r["status"] == "ok", kernel.text(r)
    return r


def _value(kernel: Kernel, expr: str) -> object:
    r = _ok(kernel, f"print(repr({expr}))")
    return eval(kernel.text(r).strip())


@pytest.fixture(scope="module")
def driver(cluster: Cluster, tmp_path_factory):
    """A kernel whose active SparkSession is the cluster's, with 2 executors registered."""
    workdir = cluster.notebooks / "cluster-driver"  # the workers cannot see it, as on a real cluster
    workdir.mkdir(exist_ok=True)
    (workdir / "where_helpers.py").write_text(WHERE)
    (workdir / "train.py").write_text(SCRIPT)
    env = {k: v for k, v in spark_env(cluster.workdir).items() if k.startswith(("SPARK_", "PYSPARK"))}
    kernel = Kernel({**env, "JUPYTER_TORCHDIST_WARMUP": "1"})   # the extension's default: nothing of ours may start
    family: set[int] = set()
    try:
        r = _ok(kernel, textwrap.dedent(f"""
            import os, sys, time
            os.chdir({str(workdir)!r}); sys.path.insert(0, {str(workdir)!r})
            from pyspark.sql import SparkSession
            builder = SparkSession.builder
            for k, v in {session_conf(cluster.url)!r}.items():
                builder = builder.config(k, v)
            t0 = time.time()
            spark = builder.getOrCreate()
            jsc = spark.sparkContext._jsc.sc()
            while jsc.getExecutorMemoryStatus().size() < 3 and time.time() - t0 < 120:  # driver + 2 executors
                time.sleep(0.1)
            print("executors", jsc.getExecutorMemoryStatus().size() - 1, "after", round(time.time() - t0, 1))
            %load_ext jupyter_torchdist
            exec({WHERE!r})  # defined in the notebook: travels by value (an imported local module would not)
            from jupyter_torchdist import last_run
        """))
        assert "executors 2" in kernel.text(r), kernel.text(r) + cluster.logs()
        yield kernel, workdir
        family = descendants_of(kernel.pid) if kernel.pid else set()
        kernel.execute("spark.stop()")
    finally:
        kernel.shutdown()
    deadline = time.monotonic() + 30
    while alive(family) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(family), "driver-side processes (the driver JVM, ...) outlived the kernel"


def test_cell_ranks_run_in_different_executor_jvms(driver, cluster):
    kernel, _ = driver
    cell = textwrap.dedent("""\
        %%distribute -n 2 --all-ranks -o placements
        import torch, torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(torch.nn.Linear(4, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(5):
            x = torch.randn(8, 4)
            loss = (model(x) ** 2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
        {"rank": dist.get_rank(), "jvm": executor_jvm(), "w": model.module.weight.detach().sum().item(),
         "master": os.environ["MASTER_ADDR"]}
    """)
    _ok(kernel, cell)
    _ok(kernel, cell)  # a rerun on the warm executors
    placements = _value(kernel, "placements")
    assert [p["rank"] for p in placements] == [0, 1]
    jvms = [p["jvm"] for p in placements]
    assert None not in jvms and len({pid for pid, _ in jvms}) == 2 and len({ex for _, ex in jvms}) == 2, jvms
    assert all(pid in cluster.family() for pid, _ in jvms), "the ranks ran in the cluster's executors"
    assert placements[0]["w"] == pytest.approx(placements[1]["w"])  # DDP kept the replicas in sync
    assert _value(kernel, "last_run().state.backend") == f"spark {cluster.url}"


def test_failure_on_the_cluster_names_the_rank_and_line(driver):
    kernel, _ = driver
    r = kernel.execute("%%distribute -n 2\nimport torch.distributed as dist\n"
                       "if dist.get_rank() == 1:\n    raise KeyError('lost-on-executor')\ndist.barrier()\n")
    assert r["status"] == "error" and r["error"]["ename"] == "RunFailed", kernel.text(r)
    text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(r["error"]["traceback"]))
    assert "rank 1" in text and "KeyError: 'lost-on-executor'" in text and "line 4" in text
    _ok(kernel, "1 + 1")


def test_script_runs_on_the_cluster(driver):
    kernel, _ = driver
    r = _ok(kernel, "%distribute -n 2 train.py --epochs 1")
    lines = _value(kernel, "[t for _, t in last_run().logs[1]]")
    assert any(line.startswith("script rank=1 sum=2.0 jvm=(") and "args=['--epochs', '1']" in line
               for line in lines), lines
    assert not [o for o in r["outputs"] if o["output_type"] == "execute_result"]


def test_torch_distributor_runs_on_the_cluster(driver):
    kernel, _ = driver
    r = _ok(kernel, textwrap.dedent("""\
        from jupyter_torchdist import TorchDistributor

        def train(lr, steps=3):
            import torch, torch.distributed as dist
            dist.init_process_group("gloo")  # as written for pyspark's TorchDistributor
            t = torch.tensor([float(dist.get_rank())])
            dist.all_reduce(t)
            return {"lr": lr, "steps": steps, "sum": t.item(), "jvm": executor_jvm()}

        dist_value = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(train, 0.5, steps=4)
        script_value = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run("train.py", "--x", 1)
        print(repr((dist_value, script_value)))
    """))
    value, script_value = eval(kernel.text(r).strip().splitlines()[-1])
    assert value["lr"] == 0.5 and value["steps"] == 4 and value["sum"] == 1.0 and value["jvm"] is not None
    assert script_value is None


def test_kept_ranks_on_the_cluster_keep_their_state_and_stop_cleanly(driver, cluster):
    kernel, _ = driver
    _ok(kernel, "%%distribute --keep -n 2\nimport os, torch, torch.distributed as dist\n"
                "w = torch.zeros(3); where = executor_jvm()\nos.getpid()")
    _ok(kernel, "%%distribute --keep --all-ranks -o kept_cells\nw += 1\nt = w.clone()\ndist.all_reduce(t)\n"
                "(t.tolist(), os.getpid(), where)")
    cells = _value(kernel, "kept_cells")
    assert [c[0] for c in cells] == [[2.0, 2.0, 2.0]] * 2, "w kept across cells, the group still up"
    jvms = [c[2] for c in cells]
    assert None not in jvms and len({ex for _, ex in jvms}) == 2, jvms
    assert all(c[2][0] in cluster.family() for c in cells)
    pids = [c[1] for c in cells]
    r = _ok(kernel, "%distribute_stop")
    assert "stopped the 2 kept ranks" in kernel.text(r)
    deadline = time.monotonic() + 15
    while alive(set(pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(set(pids)), "every kept rank process ended"
    _ok(kernel, "%%distribute -n 2\n1")  # the slots are free again


def test_background_runs_on_the_cluster_take_its_two_slots_in_turn(driver, cluster):
    """Two 2-rank background runs on a cluster of 2 slots: the second waits its turn, then runs in the executors."""
    kernel, _ = driver
    cell = ("%%distribute -n 2 --background\nimport time\nfor i in range(20):\n    time.sleep(0.1)\n"
            "    jupyter_torchdist.report(step=i + 1, total=20)\nexecutor_jvm()")
    _ok(kernel, "import jupyter_torchdist, jupyter_torchdist as jt")
    _ok(kernel, cell)
    _ok(kernel, cell)
    said = _value(kernel, "[r.wait(180) for r in jt.runs()[-2:]] and "
                          "(jt.runs()[-1].started_at >= jt.runs()[-2].ended_at, [r.state for r in jt.runs()[-2:]], "
                          "jt.runs()[-1].result())")
    after, states, jvm = said
    assert after and states == ["done", "done"] and jvm[0] in cluster.family()
    # decided on the runs' own threads, where the JVM's active session is None: the notebook's session all the same
    assert _value(kernel, "[r.where for r in jt.runs()[-2:]]") == [f"spark {cluster.url}"] * 2
    _ok(kernel, "from jupyter_torchdist.launchers.session import embedded as E\n"
                "from jupyter_torchdist.launchers import local_server as L")
    assert _value(kernel, "(E.embedded_session(), L.zygote_pid())") == (None, None)  # nothing of ours beside it


def test_gpu_on_a_cluster_without_gpu_scheduling_is_refused(driver):
    kernel, _ = driver
    r = kernel.execute("from jupyter_torchdist import TorchDistributor\n"
                       "TorchDistributor(num_processes=2, local_mode=False).run(len, [])")
    assert r["status"] == "error" and r["error"]["ename"] == "LaunchError"
    assert "spark.task.resource.gpu.amount" in r["error"]["evalue"] and "use_gpu=False" in r["error"]["evalue"]


def test_horovod_spark_run_returns_every_rank_from_different_executor_jvms(driver, cluster):
    kernel, _ = driver
    _ok(kernel, textwrap.dedent("""\
        from jupyter_torchdist.horovod import spark as hvd_spark

        def hvd_where(base):
            import torch
            import jupyter_torchdist.horovod as hvd
            hvd.init()
            total = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum).item()
            return {"rank": hvd.rank(), "size": hvd.size(), "value": base + total, "jvm": executor_jvm(),
                    "env": os.environ.get("HVD_CLUSTER_TEST")}

        hvd_values = hvd_spark.run(hvd_where, args=(10.0,), num_proc=2, env={"HVD_CLUSTER_TEST": "on-executor"})
    """))
    values = _value(kernel, "hvd_values")
    assert [v["rank"] for v in values] == [0, 1]
    assert all(v["size"] == 2 and v["value"] == 11.0 and v["env"] == "on-executor" for v in values), values
    jvms = [v["jvm"] for v in values]
    assert None not in jvms and len({pid for pid, _ in jvms}) == 2 and len({ex for _, ex in jvms}) == 2, jvms
    assert all(pid in cluster.family() for pid, _ in jvms), "the ranks ran in the cluster's executors"


def test_the_doctor_checks_the_clusters_executors_against_the_kernel(driver):
    """%distribute_doctor runs a task per slot: each executor's Python has the kernel's versions and reaches back."""
    kernel, _ = driver
    text = kernel.text(_ok(kernel, "%distribute_doctor"))
    assert text.count("ok    executor Python on ") >= 1 and "same versions as the kernel" in text, text
    assert "channel reach" not in text and text.strip().endswith("nothing missing"), text


def test_places_on_timeout_and_pdb_on_a_rank_in_an_executor(driver):
    """Ranks in executor JVMs say where they are when --timeout stops a rank-divergent collective, and a
    breakpoint() on one of them is answered from the notebook."""
    kernel: Kernel = driver[0]
    r = kernel.execute(HANG.format(opts="--timeout 25").replace(" --local", ""), timeout=240)
    text = kernel.text(r)
    assert r["error"]["ename"] == "RunTimeout" and "spark://" in text, text
    assert "rank 0: waiting in all_reduce at cell line 6 for " in text
    assert "rank 1: in time.sleep at cell line 8" in text
    r = kernel.execute(BREAK.replace(" --local", ""), answers=["p x", "c"], timeout=240)
    assert r["status"] == "ok" and r["prompts"] == ["rank 1 (Pdb) "] * 2, kernel.text(r)
    streams = "".join(o.get("text", "") for o in r["outputs"] if o["output_type"] == "stream")
    assert "\n11\n" in streams and "-> t = torch.tensor([float(x)])" in streams
    assert [o["data"]["text/plain"] for o in r["outputs"] if o["output_type"] == "execute_result"] == ["21.0"]
