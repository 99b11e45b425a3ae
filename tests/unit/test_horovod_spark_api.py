"""jupyter_torchdist.horovod.spark.run (horovod.spark.run) before anything starts: imports without pyspark, the
arguments refused at once, and Horovod's other Spark entry points."""
from __future__ import annotations

import re

import os
import subprocess
import sys

import pytest

from jupyter_torchdist.horovod import HorovodUnsupportedError
from jupyter_torchdist.horovod import spark as hvd_spark

from .. import support
from ..support.horovod import where

ROOT = str(support.ROOT)


@pytest.mark.slow  # seconds: imports in a fresh process
def test_importing_the_api_does_not_import_pyspark_and_spark_resolves():
    code = ("import sys\nimport jupyter_torchdist.horovod as hvd\nprint('pyspark' in sys.modules)\n"
            "from jupyter_torchdist.horovod import spark\nimport jupyter_torchdist.horovod.spark as again\n"
            "print(hvd.spark is spark is again, callable(spark.run), 'pyspark' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "True", "False"]


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


@pytest.mark.parametrize("arguments, message", [
    ({"num_proc": 5, "max_num_proc": 4}, "num_proc=5 is outside min_num_proc=None .. max_num_proc=4"),
    ({"num_proc": 1, "min_num_proc": 2}, "num_proc=1 is outside min_num_proc=2"),
    ({"min_np": 3, "max_np": 2}, "num_proc=3 is outside min_num_proc=3 .. max_num_proc=2"),
    ({"num_proc": 2, "reset_limit": -1}, "reset_limit must be a whole number"),
    ({"num_proc": 2, "min_num_proc": 0}, "min_num_proc must be a whole number"),
])
def test_run_elastic_refuses_bad_arguments_before_anything_starts(arguments, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        hvd_spark.run_elastic(where, (0.0,), **arguments)


def test_run_elastic_refuses_nics_as_run_does():
    with pytest.raises(HorovodUnsupportedError, match="GLOO_SOCKET_IFNAME"):
        hvd_spark.run_elastic(where, (0.0,), num_proc=2, nics=["eth0"])


def test_horovods_other_spark_entry_points_say_what_to_use():
    with pytest.raises(HorovodUnsupportedError, match="only run"):
        hvd_spark.KerasEstimator  # noqa: B018
