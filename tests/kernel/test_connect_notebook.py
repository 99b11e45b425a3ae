"""examples/06_spark_connect.ipynb, executed in a real kernel by nbclient: a notebook whose session is a Spark Connect
client (its own local Connect server, as on a laptop) trains, feeds a Connect DataFrame and keeps ranks."""
from __future__ import annotations

import pytest

from ..support.notebooks import POOLED, errors, execute_example, outputs, reports, stream_text

pytestmark = [pytest.mark.spark, POOLED]  # POOLED: the first test to read a notebook runs the pool


@pytest.fixture(scope="module")
def executed():
    return execute_example("06_spark_connect.ipynb")


def test_the_example_runs_every_capability_on_its_connect_session(executed):
    assert not errors(executed), errors(executed)
    assert "backend: spark connect" in stream_text(executed)
    assert "stopped the 2 kept ranks" in stream_text(executed)
    shown = reports(executed)
    assert len(shown) == 4 and all(r["status"] == "succeeded" for r in shown)
    assert shown[0]["value_repr"] is not None and float(shown[0]["value_repr"]) < 0.1  # the model learnt y = sum(x)
    values = [o["data"]["text/plain"] for o in outputs(executed) if o.output_type == "execute_result"]
    assert "[8, 8]" in values  # 512 rows, batches of 32: 8 equal steps on each rank
    assert "[[0, 1], [1, 1]]" in values  # kept ranks kept `seen` from one cell to the next
