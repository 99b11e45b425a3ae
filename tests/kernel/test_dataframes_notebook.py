"""examples/04_dataframes.ipynb, executed in a real kernel by nbclient, as a user would run it."""
from __future__ import annotations

import pytest

from ..support.notebooks import POOLED, errors, execute_example, reports, stream_text

pytestmark = [pytest.mark.spark, POOLED]  # POOLED: the first test to read a notebook runs the pool
pytest.importorskip("pyarrow")


@pytest.fixture(scope="module")
def executed():
    return execute_example("04_dataframes.ipynb")


def test_the_example_trains_from_a_dataframe_and_learns(executed):
    assert not errors(executed), errors(executed)
    text = stream_text(executed)
    assert "loss per epoch:" in text and "input wait by rank:" in text and "'rows': 6144" in text


def test_the_saved_report_shows_where_the_time_goes(executed):
    shown = reports(executed)
    assert len(shown) == 1 and shown[0]["status"] == "succeeded"
    report = shown[0]
    assert report["data"]["workers"] == 2 and report["data"]["rows"] == 6144
    assert all(r["usage"]["input_wait"] is not None and r["usage"]["rss"] > 0 for r in report["ranks"])
    assert [r["step"] for r in report["ranks"]] == [96, 96]
