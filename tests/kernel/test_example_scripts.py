"""examples/02_scripts_and_torchdistributor.ipynb in a real kernel (nbclient)."""
from __future__ import annotations

import pytest

from ..support.notebooks import POOLED, execute_example

MIME = "application/vnd.jupyter-torchdist.run+json"
pytestmark = POOLED


@pytest.fixture(scope="module")
def executed():
    return execute_example("02_scripts_and_torchdistributor.ipynb")


def _outputs(nb, index):
    return nb.cells[index].get("outputs", [])


def _reports(nb):
    return [(i, o["data"][MIME]) for i, c in enumerate(nb.cells) for o in c.get("outputs", [])
            if MIME in o.get("data", {})]


def test_every_cell_ran_without_error(executed):
    errors = [o for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, [o.get("traceback") for o in errors]


def test_the_script_ran_with_its_arguments_and_reported_progress(executed):
    runs = _reports(executed)
    assert len(runs) == 4, "two scripts, two TorchDistributor runs"
    (_, first), (_, second) = runs[0], runs[1]
    assert first["status"] == second["status"] == "succeeded"
    assert first["backend"] == second["backend"] == "local"
    assert any("epoch 3/3" in line and "world 2" in line for _, line in first["ranks"][0]["log_tail"])
    assert any("epoch 2/2" in line for _, line in second["ranks"][0]["log_tail"])
    assert first["ranks"][1]["step"] == first["ranks"][1]["total"] > 0  # report() reached the view
    assert second["ranks"][1]["total"] < first["ranks"][1]["total"]  # --batch-size 128: fewer steps


def test_torch_distributor_value_and_script(executed):
    index, fn_run = _reports(executed)[2]
    assert fn_run["status"] == "succeeded" and fn_run["backend"] == "local"
    value = [o for o in _outputs(executed, index) if o.output_type == "execute_result"]
    losses = eval(value[0]["data"]["text/plain"])
    assert len(losses) == 5 and losses[-1] < losses[0]
    index, script_run = _reports(executed)[3]
    assert script_run["status"] == "succeeded"
    assert any("epoch 1/1" in line for _, line in script_run["ranks"][0]["log_tail"])
    assert not [o for o in _outputs(executed, index) if o.output_type == "execute_result"], "a script returns None"
