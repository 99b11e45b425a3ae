"""examples/10_restarts.ipynb in a real kernel (nbclient): a rank SIGKILLed mid-cell, the cell started again from the
last commit, one report that names the failed attempt, and the curve across both attempts."""
from __future__ import annotations

import pytest

from ..support.notebooks import POOLED, errors, execute_example, outputs, reports, stream_text

pytestmark = [pytest.mark.spark, POOLED]  # POOLED: the first test to read a notebook runs the pool


@pytest.fixture(scope="module")
def executed():
    return execute_example("10_restarts.ipynb")


def test_the_run_finished_on_its_second_attempt_from_the_last_commit(executed):
    assert not errors(executed), errors(executed)
    [report] = reports(executed)
    assert report["status"] == "succeeded", report["status"]
    assert all(r["step"] == r["total"] == 60 for r in report["ranks"]), report["ranks"]
    assert "the second attempt resumed from step" in stream_text(executed)
    assert any("image/png" in o.get("data", {}) for o in outputs(executed))
