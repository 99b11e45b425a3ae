"""The framework guides (docs/frameworks/*.md) run as written: every ```ipython block of a guide is a cell, and all
guides run in order in one real kernel (nbclient), so that a guide cannot drift from what works. Each guide's runs
are checked through the reports they leave: every rank trained, the value and what the view showed."""
from __future__ import annotations

from typing import Any

import pytest

from ..support.notebooks import MIME, POOLED
from ..support.pool import GUIDES, guide_cells, guides

pytestmark = [pytest.mark.spark, POOLED]  # the kernel may start the embedded session; runs are --local


@pytest.fixture(scope="module")
def executed() -> dict[str, list[Any]]:
    """Every guide's cells in one notebook, run top to bottom in a fresh kernel in an empty folder (in the pool of
    every notebook the tests run: support/pool.py); by guide."""
    pytest.importorskip("nbformat")
    return guides()


def _errors(cells: list[Any]) -> list[Any]:
    return ["\n".join(o.get("traceback", [])) for c in cells for o in c.outputs if o.output_type == "error"]


def _value(cells: list[Any]) -> str:
    """The last cell's value, as text."""
    return next(o["data"]["text/plain"] for o in cells[-1].outputs if o.output_type == "execute_result")


def _reports(cells: list[Any]) -> list[dict[str, Any]]:
    return [o["data"][MIME] for c in cells for o in c.outputs if MIME in o.get("data", {})]


def _trained(report: dict[str, Any]) -> None:
    assert report["status"] == "succeeded" and report["world_size"] == 2, report["status"]
    for rank in report["ranks"]:
        assert rank["total"] and rank["step"] == rank["total"], rank


def test_every_guide_has_cells_that_run_a_distribute_cell_or_a_distributor():
    for name in GUIDES:
        cells = guide_cells(name)
        assert cells[0] == "%load_ext jupyter_torchdist", name
        assert any("%%distribute -n 2" in c or "Distributor(" in c for c in cells), name


@pytest.mark.parametrize("name, runs", [("lightning", 1), ("huggingface", 2)])
def test_the_trainers_report_every_ranks_steps_and_logged_metrics_to_the_view(executed, name, runs):
    cells = executed[name]
    assert not _errors(cells), _errors(cells)
    assert "'world_size': 2" in _value(cells)
    reports = _reports(cells)
    assert len(reports) == runs
    for report in reports:
        _trained(report)
        assert all(r["metrics"].get("loss") is not None for r in report["ranks"]), report["ranks"]
        assert all(len(r["loss_history"]) >= 2 for r in report["ranks"])


def test_the_hugging_face_trainer_runs_zero_2_on_cpu_from_a_deepspeed_config(executed):
    assert "'zero_stage': 2" in _value(executed["huggingface"])


def test_accelerate_runs_its_loop_on_the_two_ranks(executed):
    cells = executed["accelerate"]
    assert not _errors(cells), _errors(cells)
    assert "'processes': 2" in _value(cells) and "MULTI_CPU" in _value(cells)
    _trained(_reports(cells)[0])


def test_fsdp2_shards_and_gathers_the_whole_model(executed):
    cells = executed["fsdp2"]
    assert not _errors(cells), _errors(cells)
    assert "'parameters': 321" in _value(cells)  # 8*32+32 + 32*1+1, gathered from the shards
    _trained(_reports(cells)[0])


def test_deepspeed_zero3_in_a_cell_and_a_file_through_the_distributor(executed):
    cells = executed["deepspeed"]
    assert not _errors(cells), _errors(cells)
    cell_run, file_run = _reports(cells)
    _trained(cell_run)
    assert "'zero_stage': 3" in "".join(o["data"]["text/plain"] for c in cells for o in c.outputs
                                        if o.output_type == "execute_result")
    assert file_run["status"] == "succeeded" and file_run["world_size"] == 2
    assert file_run["title"].startswith("DeepspeedTorchDistributor.run('ds_train.py')"), file_run["title"]
    lines = [line for _, line in file_run["ranks"][0]["log_tail"]]
    assert any(line.startswith("final loss") for line in lines), lines


def test_torchdistributor_returns_rank_0s_value(executed):
    cells = executed["torchdistributor"]
    assert not _errors(cells), _errors(cells)
    assert float(_value(cells)) < 1.0
