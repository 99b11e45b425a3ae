"""examples/03_kept_ranks.ipynb, executed in a real kernel by nbclient, as a user would run it."""
from __future__ import annotations

import pathlib

import pytest

pytestmark = pytest.mark.spark

ROOT = pathlib.Path(__file__).resolve().parents[1]
MIME = "application/vnd.jupyter-torchdist.run+json"


@pytest.fixture(scope="module")
def executed():
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "examples" / "03_kept_ranks.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "examples")}}).execute()
    return nb


def _outputs(nb):
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def test_the_example_trains_across_cells_plots_evaluates_and_stops(executed):
    outs = _outputs(executed)
    assert not [o for o in outs if o.output_type == "error"], [o.get("traceback") for o in outs]
    text = "\n".join(o.get("text", "") for o in outs if o.output_type == "stream")
    assert "loss per epoch:" in text and "KeptInfo(n=2" in text and "stopped the 2 kept ranks" in text
    assert any("image/png" in o.get("data", {}) for o in outs), "the loss is plotted in the notebook"


def test_each_kept_cell_leaves_its_report_and_steps_continue(executed):
    reports = [o["data"][MIME] for o in _outputs(executed) if MIME in o.get("data", {})]
    assert len(reports) == 4 and all(r["status"] == "succeeded" for r in reports)
    steps = [[x["step"] for x in r["ranks"]] for r in reports[1:3]]
    assert steps == [[40, 40], [80, 80]], "the second training cell went on from step 40"
