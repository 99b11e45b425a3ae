"""examples/02_scripts_and_torchdistributor.ipynb in a real kernel (nbclient), and its script under torchrun."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
MIME = "application/vnd.jupyter-torchdist.run+json"


@pytest.fixture(scope="module")
def executed():
    nbformat = pytest.importorskip("nbformat")  # slow to import: once per module
    from nbclient import NotebookClient

    nb = nbformat.read(EXAMPLES / "02_scripts_and_torchdistributor.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    return nb


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


TEARDOWN_ABORT = "terminate called without an active exception"


def _torchrun_example(cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--standalone", str(EXAMPLES / "train_script.py"), "--epochs", "1"],
                          capture_output=True, text=True, timeout=240, cwd=cwd,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


def test_the_example_script_is_a_real_torchrun_script(tmp_path):
    out = _torchrun_example(tmp_path)
    if out.returncode != 0 and TEARDOWN_ABORT in out.stderr and "epoch 1/1" in out.stdout:
        # torch 2.13's gloo sometimes aborts a rank in its own teardown after the script finished
        # (upstream: pytorch/pytorch#179291); nothing in the script can prevent it, so run it once more
        out = _torchrun_example(tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "epoch 1/1" in out.stdout and "world 2" in out.stdout
