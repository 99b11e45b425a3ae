"""examples/05_horovod.ipynb in a real kernel (nbclient): the Horovod-style script under %distribute, the same model
under plain DDP with the same losses, and horovod.spark.run."""
from __future__ import annotations

import pathlib
import re

import pytest

pytestmark = pytest.mark.spark

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
MIME = "application/vnd.jupyter-torchdist.run+json"


@pytest.fixture(scope="module")
def executed():
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    nb = nbformat.read(EXAMPLES / "05_horovod.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    return nb


def _text(nb) -> str:
    return "\n".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.output_type == "stream")


def _reports(nb) -> list[dict]:
    return [o["data"][MIME] for c in nb.cells for o in c.get("outputs", []) if MIME in o.get("data", {})]


def test_every_cell_ran_without_error(executed):
    errors = [o for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, [o.get("traceback") for o in errors]


def test_the_horovod_script_ran_on_two_ranks_and_learned(executed):
    script, ddp, spark_run = _reports(executed)
    assert [r["status"] for r in (script, ddp, spark_run)] == ["succeeded"] * 3
    assert script["world_size"] == ddp["world_size"] == spark_run["world_size"] == 2
    lines = [line for _, line in script["ranks"][0]["log_tail"]]
    assert any(line.startswith("epoch 2: test loss") and "(size 2, local size 2)" in line for line in lines), lines
    assert script["ranks"][1]["step"] == script["ranks"][1]["total"] == 32  # report() reached the view


def test_the_losses_agree_with_ddp(executed):
    text = _text(executed)
    hvd = [float(x) for x in re.search(r"Horovod API: (.*)", text).group(1).split()]
    ddp = [float(x) for x in re.search(r"plain DDP: +(.*)", text).group(1).split()]
    assert len(hvd) == len(ddp) == 32 and hvd == pytest.approx(ddp, abs=2e-4)
    loss_diff, param_diff = map(float, re.search(r"max \|loss difference\| (\S+); max \|parameter difference\| "
                                                 r"(\S+)", text).groups())
    assert loss_diff < 1e-4 and param_diff < 1e-5
    print(f"\nDDP equality: max |loss difference| {loss_diff:.2e}, max |parameter difference| {param_diff:.2e}; "
          f"first/last loss {hvd[0]:.4f}/{hvd[-1]:.4f}")


def test_horovod_spark_run_returned_every_rank_in_order(executed):
    text = _text(executed)
    assert "[{'rank': 0, 'examples': 256," in text and "{'rank': 1, 'examples': 256," in text, text
    assert re.search(r"accuracy (\S+)% \(the script reported \1%\)", text), text
