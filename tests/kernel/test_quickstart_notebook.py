"""examples/01_quickstart.ipynb, executed in a real kernel by nbclient, as a user would run it."""
from __future__ import annotations

import pytest

from ..support.notebooks import POOLED, MIME, execute_example

pytestmark = [pytest.mark.spark, POOLED]  # POOLED: the first test to read a notebook runs the pool


@pytest.fixture(scope="module")
def executed():
    return execute_example("01_quickstart.ipynb", store_widget_state=True)


def test_quickstart_learns_and_returns_losses(executed):
    outs = [o for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outs if o.output_type == "error"], [o.get("traceback") for o in outs]
    results = [o for o in outs if o.output_type == "execute_result"]
    assert results, "the %%distribute cell's value is the cell's output"
    losses = eval(results[0]["data"]["text/plain"])  # a plain list of floats
    assert isinstance(losses, list) and len(losses) == 4 and losses[-1] < losses[0]


def test_quickstart_leaves_a_report_and_no_stale_widget_state(executed):
    """The report is the cell's output. Whether the live widget showed first depends on how long the ranks ran
    (``views/live.SHOW_AFTER_S``): a saved notebook keeps its state only if it did, and then its last frame shows
    both ranks done, never a run still going. That the widget's last frame reaches the notebook at all is tested
    where the cell certainly outlasts the wait (``test_debug_kernel``)."""
    reports = [o for c in executed.cells for o in c.get("outputs", []) if MIME in o.get("data", {})]
    assert len(reports) == 1
    snap = reports[0]["data"][MIME]
    assert snap["status"] == "succeeded" and snap["world_size"] == 2
    assert all(r["state"] == "done" and r["step"] == r["total"] > 0 for r in snap["ranks"])
    assert all(r["loss_history"] for r in snap["ranks"])
    assert any("epoch 3" in line for _, line in snap["ranks"][0]["log_tail"])
    kept = executed.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    live = [m["state"]["snapshot"] for m in kept.get("state", {}).values()
            if m["model_name"] == "AnyModel" and m["state"].get("snapshot")]
    assert [[r["state"] for r in s["ranks"]] for s in live[-1:]] in ([], [["done", "done"]]), \
        "a kept live view ends showing both ranks done"


def test_the_readmes_first_snippet_runs_as_written_in_a_fresh_notebook():
    """The two cells at the top of the README, verbatim, in a fresh kernel (the embedded session starts for them)."""
    import re

    from ..support import ROOT
    from ..support.kernel import Kernel

    first, second = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)[:2]
    assert first.strip() == "%load_ext jupyter_torchdist" and second.startswith("%%distribute")
    k = Kernel({"JUPYTER_TORCHDIST_WARMUP": "1"})
    try:
        assert k.execute(first)["status"] == "ok"
        r = k.execute(second, timeout=240)
        assert r["status"] == "ok", k.text(r)
        [result] = [o for o in r["outputs"] if o["output_type"] == "execute_result"]
        losses = eval(result["data"]["text/plain"])
        assert len(losses) == 5 and losses[-1] < losses[0] / 10, losses
    finally:
        k.shutdown()
