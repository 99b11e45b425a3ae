"""examples/04_dataframes.ipynb, executed in a real kernel by nbclient, as a user would run it."""
from __future__ import annotations

import pathlib

import pytest

pytestmark = pytest.mark.spark
pytest.importorskip("pyarrow")

ROOT = pathlib.Path(__file__).resolve().parents[1]
MIME = "application/vnd.jupyter-torchdist.run+json"


@pytest.fixture(scope="module")
def executed():
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "examples" / "04_dataframes.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "examples")}}).execute()
    return nb


def _outputs(nb):
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def test_the_example_trains_from_a_dataframe_and_learns(executed):
    outs = _outputs(executed)
    assert not [o for o in outs if o.output_type == "error"], [o.get("traceback") for o in outs]
    text = "\n".join(o.get("text", "") for o in outs if o.output_type == "stream")
    assert "loss per epoch:" in text and "input wait by rank:" in text and "'rows': 6144" in text


def test_the_saved_report_shows_where_the_time_goes(executed):
    reports = [o["data"][MIME] for o in _outputs(executed) if MIME in o.get("data", {})]
    assert len(reports) == 1 and reports[0]["status"] == "succeeded"
    report = reports[0]
    assert report["data"]["workers"] == 2 and report["data"]["rows"] == 6144
    assert all(r["usage"]["input_wait"] is not None and r["usage"]["rss"] > 0 for r in report["ranks"])
    assert [r["step"] for r in report["ranks"]] == [96, 96]
