"""examples/09_tracking_and_profiling.ipynb in a real kernel (nbclient): one MLflow run written by the kernel (read
back with MLflow's own client in the notebook), a profile that names the rank whose data loader is slow, and the
loss curve drawn from MLflow's record."""
from __future__ import annotations

import pytest

from ..support.notebooks import POOLED, errors, execute_example, outputs, reports, stream_text

pytestmark = [pytest.mark.spark, POOLED]  # POOLED: the first test to read a notebook runs the pool


@pytest.fixture(scope="module")
def executed():
    pytest.importorskip("mlflow")
    return execute_example("09_tracking_and_profiling.ipynb")


def test_every_cell_ran_and_the_run_is_on_record_with_its_profile(executed):
    assert not errors(executed), errors(executed)
    [report] = reports(executed)
    assert report["status"] == "succeeded" and report["world_size"] == 2
    assert report["profile"]["verdict"].startswith("rank 1 is the slowest"), report["profile"]
    text = stream_text(executed)
    assert "| FINISHED" in text and "40 loss points on record" in text, text
    assert "report.html" in text and "profile" in text


def test_the_curve_is_an_image(executed):
    assert any("image/png" in o.get("data", {}) for o in outputs(executed))
