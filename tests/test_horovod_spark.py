"""jupyter_torchdist.horovod.spark.run (horovod.spark.run) on the embedded Spark session: every rank's value in rank
order, args/kwargs/env, failures naming the rank, the arguments refused at once, and imports without pyspark."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import time

import cloudpickle
import pytest

from jupyter_torchdist.errors import LaunchError, RunFailed
from jupyter_torchdist.horovod import HorovodUnsupportedError
from jupyter_torchdist.horovod import spark as hvd_spark

from .conftest import process_alive

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the rank functions below travel by value

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def where(base: float, scale: float = 1.0) -> dict:
    """Horovod-style: init, one allreduce, the rank's own view of the world and of its environment."""
    import torch

    import jupyter_torchdist.horovod as hvd

    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum).item()
    print(f"hello from rank {hvd.rank()} of {hvd.size()}", flush=True)
    return {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(), "value": (base + total) * scale,
            "env": os.environ.get("HVD_SPARK_TEST"), "pid": os.getpid()}


def fails_on_rank_one() -> int:
    import jupyter_torchdist.horovod as hvd

    hvd.init()
    if hvd.rank() == 1:
        raise KeyError("lost-batch-on-rank-one")
    hvd.barrier()
    return hvd.rank()


def _gone(pids: list[int], wait_s: float = 15.0) -> bool:
    deadline = time.monotonic() + wait_s
    while any(process_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(process_alive(p) for p in pids)


def test_importing_the_api_does_not_import_pyspark_and_spark_resolves():
    code = ("import sys\nimport jupyter_torchdist.horovod as hvd\nprint('pyspark' in sys.modules)\n"
            "from jupyter_torchdist.horovod import spark\nimport jupyter_torchdist.horovod.spark as again\n"
            "print(hvd.spark is spark is again, callable(spark.run), 'pyspark' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "True", "False"]


@pytest.mark.spark
def test_every_ranks_value_in_rank_order_with_args_kwargs_and_env(spark):
    printed = io.StringIO()
    values = hvd_spark.run(where, args=(10.0,), kwargs={"scale": 2.0}, num_proc=3, env={"HVD_SPARK_TEST": "set"},
                           stdout=printed, start_timeout=30, use_gloo=True, use_mpi=False,
                           prefix_output_with_timestamp=True)
    assert [v["rank"] for v in values] == [0, 1, 2]
    assert all(v["size"] == 3 and v["value"] == (10.0 + 3.0) * 2.0 and v["env"] == "set" for v in values)
    assert sorted(v["local_rank"] for v in values) == [0, 1, 2]
    assert "HVD_SPARK_TEST" not in os.environ  # set on the ranks only
    assert all(f"[rank {r}] hello from rank {r} of 3" in printed.getvalue() for r in range(3)), printed.getvalue()
    assert _gone([v["pid"] for v in values]), "a rank process outlived the call"


@pytest.mark.spark
def test_without_env_the_function_itself_runs_and_num_proc_defaults_to_spark_parallelism(spark):
    values = hvd_spark.run(where, (1.0,), verbose=0)  # positional args, as horovod.spark.run(fn, args)
    n = spark.sparkContext.defaultParallelism
    assert [v["rank"] for v in values] == list(range(n)) and n >= 2
    assert all(v["env"] is None and v["value"] == 1.0 + n * (n - 1) / 2 for v in values)


@pytest.mark.spark
def test_a_failing_rank_raises_run_failed_naming_it(spark):
    with pytest.raises(RunFailed) as info:
        hvd_spark.run(fails_on_rank_one, num_proc=2, verbose=0)
    text = str(info.value)
    assert "rank 1" in text and "lost-batch-on-rank-one" in text, text
    assert info.value.result is not None and set(info.value.result.logs) == {0, 1}


@pytest.mark.spark
def test_more_ranks_than_slots_is_refused_before_anything_starts(spark):
    with pytest.raises(LaunchError, match="needs 100000 task slots"):
        hvd_spark.run(where, (0.0,), num_proc=100_000, verbose=0)


@pytest.mark.parametrize("arguments, advice", [
    ({"use_mpi": True}, "MPI is not used here"),
    ({"use_gloo": False}, "use_gloo=False asks for MPI"),
    ({"extra_mpi_args": "-x NCCL_DEBUG=INFO"}, "extra_mpi_args"),
    ({"nics": ["eth0"]}, "spark.executorEnv.GLOO_SOCKET_IFNAME"),
    ({"executable": "/usr/bin/python3"}, "spark.pyspark.python"),
])
def test_arguments_that_would_change_what_runs_fail_at_once(arguments, advice):
    with pytest.raises(HorovodUnsupportedError, match=advice):
        hvd_spark.run(where, (0.0,), num_proc=2, **arguments)


@pytest.mark.parametrize("arguments, error, message", [
    ({"env": {"RANK": "3"}}, ValueError, "RANK, which the launcher sets"),
    ({"env": {"SEED": 1}}, TypeError, "string values"),
    ({"num_proc": 0}, ValueError, "num_proc must be a whole number"),
    ({"num_proc": 2.0}, ValueError, "num_proc must be a whole number"),
])
def test_bad_arguments_are_refused_before_anything_starts(arguments, error, message):
    with pytest.raises(error, match=message):
        hvd_spark.run(where, (0.0,), **arguments)


def test_horovods_other_spark_entry_points_say_what_to_use():
    with pytest.raises(HorovodUnsupportedError, match="torchrun --nnodes"):
        hvd_spark.run_elastic  # noqa: B018
    with pytest.raises(HorovodUnsupportedError, match="only run"):
        hvd_spark.KerasEstimator  # noqa: B018
