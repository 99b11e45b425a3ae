"""The embedded local Spark session only: many ranks on one host, and --gpu checked against the driver's GPUs on a
local master (the launchers' shared behaviours are in test_run.py)."""
from __future__ import annotations

import pytest

import jupyter_torchdist as jt
from jupyter_torchdist.core import gpus
from jupyter_torchdist.core.errors import LaunchError

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("n", [32])
def test_many_ranks_on_one_host_with_a_trivial_cell(spark, n):
    """A cell that is just a value, on many ranks: no rank may take the group down by ending first."""
    for _ in range(2):
        assert jt.run(int, 7, n=n) == 7


def test_spark_local_master_checks_the_drivers_gpus(spark, monkeypatch):
    monkeypatch.setattr(gpus, "cuda_unfit", lambda: None)  # as if this torch were a CUDA build
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    with pytest.raises(LaunchError, match="shows 0"):
        jt.run(len, [], n=1, gpu=True)
