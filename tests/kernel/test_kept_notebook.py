"""examples/03_kept_ranks.ipynb, executed in a real kernel by nbclient, as a user would run it."""
from __future__ import annotations

import pytest

from ..support.notebooks import POOLED, errors, execute_example, outputs, reports, stream_text

pytestmark = [pytest.mark.spark, POOLED]  # POOLED: the first test to read a notebook runs the pool


@pytest.fixture(scope="module")
def executed():
    return execute_example("03_kept_ranks.ipynb")


def test_the_example_trains_across_cells_plots_evaluates_and_stops(executed):
    assert not errors(executed), errors(executed)
    text = stream_text(executed)
    assert "loss per epoch:" in text and "KeptInfo(n=2" in text and "stopped the 2 kept ranks" in text
    assert any("image/png" in o.get("data", {}) for o in outputs(executed)), "the loss is plotted in the notebook"


def test_each_kept_cell_leaves_its_report_and_steps_continue(executed):
    shown = reports(executed)
    assert len(shown) == 4 and all(r["status"] == "succeeded" for r in shown)
    steps = [[x["step"] for x in r["ranks"]] for r in shown[1:3]]
    assert steps == [[40, 40], [80, 80]], "the second training cell went on from step 40"
