"""examples/05_horovod.ipynb in a real kernel (nbclient): the Horovod-style script under %distribute, the same model
under plain DDP with the same losses, and horovod.spark.run."""
from __future__ import annotations

import re

import pytest

from ..support.notebooks import POOLED, errors, execute_example
from ..support.notebooks import reports as _reports
from ..support.notebooks import stream_text as _text

pytestmark = [pytest.mark.spark, POOLED]  # POOLED: the first test to read a notebook runs the pool


@pytest.fixture(scope="module")
def executed():
    return execute_example("05_horovod.ipynb")


def test_every_cell_ran_without_error(executed):
    assert not errors(executed), errors(executed)


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
