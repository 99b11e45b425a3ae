"""examples/11_lightning.ipynb in a real kernel (nbclient): Lightning's Trainer with strategy="ddp" joins the ranks'
process group, its steps and logged loss reach the view, and the curve is drawn."""
from __future__ import annotations

import pytest

from ..support.notebooks import POOLED, errors, execute_example, outputs, reports

pytestmark = [pytest.mark.spark, POOLED]  # POOLED: the first test to read a notebook runs the pool


@pytest.fixture(scope="module")
def executed():
    pytest.importorskip("lightning")
    return execute_example("11_lightning.ipynb")


def test_the_trainer_ran_on_both_ranks_and_reported_its_loss(executed):
    assert not errors(executed), errors(executed)
    [report] = reports(executed)
    assert report["status"] == "succeeded" and report["world_size"] == 2
    for rank in report["ranks"]:
        assert rank["total"] and rank["step"] == rank["total"] and len(rank["loss_history"]) >= 2, rank
    assert any("image/png" in o.get("data", {}) for o in outputs(executed))
