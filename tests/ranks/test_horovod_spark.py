"""jupyter_torchdist.horovod.spark.run (horovod.spark.run) on the embedded Spark session: every rank's value in rank
order, args/kwargs/env, failures naming the rank, and more ranks than slots refused."""
from __future__ import annotations

import io
import os
import time

import cloudpickle
import pytest

from jupyter_torchdist.core.errors import LaunchError, RunFailed
from jupyter_torchdist.horovod import spark as hvd_spark

from ..support import horovod as shared
from ..support.horovod import fails_on_rank_one, where
from ..support.procs import process_alive

cloudpickle.register_pickle_by_value(shared)  # the rank functions travel by value


def _gone(pids: list[int], wait_s: float = 15.0) -> bool:
    deadline = time.monotonic() + wait_s
    while any(process_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(process_alive(p) for p in pids)


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
