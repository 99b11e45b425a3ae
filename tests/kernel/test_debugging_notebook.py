"""examples/07_debugging.ipynb, executed in a real kernel by nbclient, as a user would run it: a hang from an
uneven split is said stalled, --timeout's error names where each rank was, and the fix runs."""
from __future__ import annotations

import pytest

from ..support.notebooks import POOLED, errors, execute_example, outputs, reports

pytestmark = [pytest.mark.spark, POOLED]  # POOLED: the first test to read a notebook runs the pool


@pytest.fixture(scope="module")
def executed():
    return execute_example("07_debugging.ipynb")


def test_the_hang_is_named_by_place_and_the_fix_runs(executed):
    failed = errors(executed)
    assert len(failed) == 1, failed
    text = "\n".join(failed[0])
    assert "RunTimeout" in text and "Where each rank was when the run stopped:" in text
    assert "rank 0: waiting in all_reduce at cell line 9 for " in text, text
    assert "rank 1: done: its cell had ended" in text, text
    hang, fixed = reports(executed)
    assert hang["status"] == "timeout" and fixed["status"] == "succeeded"
    assert hang["ranks"][0]["place"]["frames"][0]["code"] == "dist.all_reduce(x)                 # rank 0's fourth " \
        "all_reduce has no partner"
    assert [o["data"]["text/plain"] for o in outputs(executed) if o.output_type == "execute_result"] == ["12.0"]
