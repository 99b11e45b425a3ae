"""TorchDistributor: pyspark's constructor and run() semantics, on our local and Spark launchers; pyspark's
encryption rule on a real session's conf (``%%distribute`` too); a run started before a local-cluster's executors
registered waits for them (a real ``local-cluster`` session, in a subprocess: one SparkContext per process)."""
from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import cloudpickle
import pytest

from jupyter_torchdist import TorchDistributor
from jupyter_torchdist.core.errors import LaunchError, RunFailed

from ..support import ROOT
from ..support.cluster import FAST_JVM

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def train(lr, batch_size=8, *, epochs=1):
    """Written for pyspark's TorchDistributor: initialises the group itself, returns from every rank."""
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(epochs * 3):
        g = torch.Generator().manual_seed(100 * dist.get_rank() + step)
        x = torch.randn(batch_size, 4, generator=g)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"rank {dist.get_rank()} done")
    weights = [round(w, 5) for w in model.module.weight.detach().flatten().tolist()]
    return {"rank": int(os.environ["RANK"]), "world": int(os.environ["WORLD_SIZE"]), "lr": lr,
            "batch_size": batch_size, "epochs": epochs, "weights": weights}


def fail_on_rank_1():
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise ArithmeticError("rank one diverged")
    dist.barrier()


SCRIPT = '''\
import sys, torch.distributed as dist
dist.init_process_group("gloo")
print("script", dist.get_rank(), sys.argv[1:])
'''


def test_function_returns_rank_0s_value_with_args_and_kwargs(capsys):
    value = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(train, 0.1, 16, epochs=2)
    assert value["rank"] == 0 and value["world"] == 2
    assert (value["lr"], value["batch_size"], value["epochs"]) == (0.1, 16, 2)
    out = capsys.readouterr().out  # outside a notebook the run is shown as text, every rank's lines prefixed
    assert "[rank 0] rank 0 done" in out and "[rank 1] rank 1 done" in out


def test_script_path_gets_its_args_as_strings_and_returns_none(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    dist = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False)
    assert dist.run(str(script), "--lr", 0.5, "--flag") is None
    logs = dist.last_result.logs
    assert ("stdout", "script 1 ['--lr', '0.5', '--flag']") in logs[1]
    with pytest.raises(ValueError, match="does not support key-word"):
        dist.run(str(script), lr=0.5)


def test_failure_names_the_rank():
    with pytest.raises(RunFailed) as info:
        TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(fail_on_rank_1)
    assert info.value.rank == 1 and "ArithmeticError: rank one diverged" in str(info.value)


@pytest.mark.parametrize("n", [0, -1, 1.5, True])
def test_num_processes_must_be_a_positive_integer(n):
    with pytest.raises(ValueError, match="num_processes has to be a positive integer"):
        TorchDistributor(num_processes=n)


def test_use_gpu_defaults_to_true_like_pyspark_and_without_gpus_the_constructor_says_how_to_turn_it_off(monkeypatch):
    """As pyspark's: refused when constructed, a RuntimeError (no notebook session here: the machine's GPUs count)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    defaults = {name: p.default for name, p in inspect.signature(TorchDistributor).parameters.items()}
    assert (defaults["num_processes"], defaults["local_mode"], defaults["use_gpu"]) == (1, True, True)
    with pytest.raises(LaunchError, match="use_gpu=False") as info:
        TorchDistributor()
    assert isinstance(info.value, RuntimeError) and "CUDA_VISIBLE_DEVICES=" in str(info.value)


def test_code_written_for_pyspark_catches_a_failed_run_as_runtime_error():
    try:
        TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(fail_on_rank_1)
    except RuntimeError as exc:  # what pyspark's TorchDistributor raises
        assert isinstance(exc, RunFailed) and exc.rank == 1
    else:
        pytest.fail("the failed run raised nothing")


def test_train_object_must_be_callable_or_a_path():
    with pytest.raises(TypeError, match="function or a path"):
        TorchDistributor(use_gpu=False).run(42)


@pytest.mark.spark
def test_local_mode_false_runs_as_spark_tasks(spark):
    dist = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False)
    value = dist.run(train, 0.2)
    assert value["rank"] == 0 and value["lr"] == 0.2
    assert dist.last_result.state.backend.startswith("spark local[")


@pytest.mark.spark
def test_same_function_same_result_as_pysparks_torch_distributor(spark):
    """The switch is one import: pyspark's own TorchDistributor gives the same value for the same code."""
    from pyspark.ml.torch.distributor import TorchDistributor as PySparkTorchDistributor

    ours = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(train, 0.05, epochs=2)
    theirs = PySparkTorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(train, 0.05, epochs=2)
    assert ours["rank"] == 0  # always rank 0's value: pyspark's local mode has every rank write one output
    # file, so its value is whichever rank wrote last (seen: rank 1's). DDP makes the rest equal on all ranks.
    assert {k: v for k, v in ours.items() if k != "rank"} == {k: v for k, v in theirs.items() if k != "rank"}


# -- pyspark's encryption rule, on the real session's conf -------------------------------------------------------
@pytest.fixture
def ssl_on(spark):
    """The shared session says spark.ssl.enabled=true (its runtime conf, which the rule reads as pyspark's does);
    the switch is set by the test through the function given; both are unset afterwards."""
    spark.conf.set("spark.ssl.enabled", "true")
    try:
        yield lambda value: spark.conf.set("pytorch.spark.distributor.ignoreSsl", value)
    finally:
        spark.conf.unset("spark.ssl.enabled")
        spark.conf.unset("pytorch.spark.distributor.ignoreSsl")


@pytest.mark.spark
def test_spark_ssl_refuses_a_spark_run_until_the_switch_is_set(ssl_on, capsys, monkeypatch):
    monkeypatch.delenv("JUPYTER_TORCHDIST_CHANNEL_TLS", raising=False)
    dist = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False)
    with pytest.raises(RuntimeError, match="encryption") as info:
        dist.run(train, 0.1)
    text = str(info.value)
    assert isinstance(info.value, LaunchError) and dist.last_result is None  # refused before anything ran
    assert "pytorch.spark.distributor.ignoreSsl=true" in text and "gloo or NCCL" in text
    assert "spark.jupyter_torchdist.channel.tls=true" in text
    ssl_on("true")
    assert dist.run(train, 0.1)["rank"] == 0
    assert "running anyway" in capsys.readouterr().err


@pytest.mark.spark
def test_spark_ssl_leaves_local_mode_alone_as_pyspark(ssl_on):
    assert TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(train, 0.1)["rank"] == 0


@pytest.mark.spark
def test_spark_ssl_refuses_distribute_cells_the_same_way(ssl_on, shell):
    err = shell.run_cell("%%distribute -n 2\n1 + 1\n").error_in_exec
    assert isinstance(err, LaunchError) and "encryption" in str(err) and "ignoreSsl=true" in str(err)
    ssl_on("true")
    result = shell.run_cell("%%distribute -n 2\n1 + 1\n")
    assert result.error_in_exec is None and result.result == 2


# -- a real local-cluster session: executors register after it starts; the notebook's own GPU settings ----------
LOCAL_CLUSTER = textwrap.dedent(r"""
    import json, logging, sys, time
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession
    from jupyter_torchdist import TorchDistributor
    from jupyter_torchdist.launchers.session.embedded import slots_available

    def emit(**kw):
        print("RESULT " + json.dumps(kw), flush=True)

    def train():
        import torch.distributed as dist
        return [dist.get_rank(), dist.get_world_size()]

    conf = SparkConf().setAll(json.loads(sys.argv[1]))
    sc = SparkContext("local-cluster[2,1,1024]", "td-local-cluster", conf=conf)
    spark = SparkSession(sc)
    slots = slots_available(spark)  # right after the start: the executors are still registering
    t0 = time.monotonic()
    try:
        emit(case="wait", slots_at_start=slots, value=TorchDistributor(2, False, False).run(train),
             seconds=time.monotonic() - t0)
    except Exception as exc:
        emit(case="wait", slots_at_start=slots, error=f"{type(exc).__name__}: {exc}")

    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logging.getLogger("TorchDistributor").addHandler(handler)
    capped = TorchDistributor(8, True, True)
    emit(case="driver_gpus", input_params=capped.input_params, warnings=[r.getMessage() for r in records],
         spark_is_the_notebooks=capped.spark is spark)
    try:
        TorchDistributor(2, False, True)
        emit(case="task_gpus", error=None)
    except RuntimeError as exc:
        emit(case="task_gpus", error=type(exc).__name__, message=str(exc))
    spark.stop()
""")


def _slow_java(home: Path) -> Path:
    """A JAVA_HOME whose ``java`` starts 4 s late: executors launched with it register after the run has begun, as
    on a cluster still getting its executors (Spark's worker takes the executors' JAVA_HOME from executorEnv)."""
    real = os.path.realpath(shutil.which("java") or "java")
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text(f'#!/bin/sh\nsleep 4\nexec "{real}" "$@"\n')
    (home / "bin" / "java").chmod(0o755)
    return home


@pytest.fixture(scope="module")
def local_cluster_run(tmp_path_factory):
    where = tmp_path_factory.mktemp("local-cluster")
    (where / "run.py").write_text(LOCAL_CLUSTER)
    gpus = where / "gpus.sh"  # the driver's GPUs, as pyspark's own tests declare them (no real GPU needed)
    gpus.write_text('#!/bin/sh\necho \'{"name": "gpu", "addresses": ["0", "1", "2"]}\'\n')
    gpus.chmod(0o755)
    conf = {"spark.executorEnv.JAVA_HOME": str(_slow_java(where / "slow-java")),
            "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1", "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false", "spark.log.level": "ERROR",
            "spark.executorEnv.PYTHONPATH": str(ROOT), "spark.executor.extraJavaOptions": FAST_JVM,
            "spark.driver.resource.gpu.amount": "3", "spark.driver.resource.gpu.discoveryScript": str(gpus)}
    env = dict(os.environ, JUPYTER_TORCHDIST_WARMUP="0", CUDA_VISIBLE_DEVICES="", PYSPARK_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                                                   os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, str(where / "run.py"), json.dumps(sorted(conf.items()))],
                          capture_output=True, text=True, timeout=300, env=env, cwd=where)
    results = {item["case"]: item for item in (json.loads(line[7:]) for line in done.stdout.splitlines()
                                               if line.startswith("RESULT "))}
    assert done.returncode == 0 and len(results) == 3, done.stdout[-3000:] + done.stderr[-3000:]
    results["stdout"] = done.stdout
    return results


@pytest.mark.spark
def test_a_run_right_after_a_local_cluster_starts_waits_for_its_executors(local_cluster_run):
    r = local_cluster_run["wait"]
    assert r["slots_at_start"] < 2, "the executors were all up already: this run did not test the wait"
    assert r.get("error") is None and r["value"] == [0, 2], r
    assert "waiting for 2 task slots on local-cluster[2,1,1024]" in local_cluster_run["stdout"]


@pytest.mark.spark
def test_the_notebooks_session_decides_the_drivers_gpus_as_in_pyspark(local_cluster_run):
    """spark.driver.resource.gpu.amount=3 (with a discovery script): 8 local processes are capped at 3, once said."""
    r = local_cluster_run["driver_gpus"]
    assert r["input_params"] == {"num_processes": 3, "local_mode": True, "use_gpu": True, "num_tasks": 3}
    assert len(r["warnings"]) == 1 and "num_processes=8" in r["warnings"][0]
    assert r["spark_is_the_notebooks"]


@pytest.mark.spark
def test_the_notebooks_session_without_a_task_gpu_amount_refuses_use_gpu_on_spark(local_cluster_run):
    r = local_cluster_run["task_gpus"]
    assert r["error"] == "LaunchError" and "spark.task.resource.gpu.amount is unset" in r["message"]
