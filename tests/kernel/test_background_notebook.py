"""examples/08_background_runs.ipynb, executed in a real kernel by nbclient, as a user would run it: a background run
while another cell runs, its value through %distribute_wait and -o, a sweep with its table and saved report, and a
search whose worse members ASHA stops early, each marked in the saved comparison."""
from __future__ import annotations

import re

import pytest

from ..support.notebooks import POOLED, errors, execute_example, outputs, reports, stream_text

pytestmark = [pytest.mark.spark, POOLED]  # POOLED: the first test to read a notebook runs the pool

SWEEP_MIME = "application/vnd.jupyter-torchdist.sweep+json"


@pytest.fixture(scope="module")
def executed():
    return execute_example("08_background_runs.ipynb")


def test_the_background_run_trains_while_the_next_cell_runs_and_its_view_becomes_its_report(executed):
    assert not errors(executed), errors(executed)
    text = stream_text(executed)
    # the next cell ran while the run went on: still waiting for its ranks (a loaded machine) or training
    assert re.search(r"^(queued|running) while this cell ran: 45$", text, re.M), text
    assert "done ['bias', 'weight']" in text
    shown = reports(executed)
    assert shown and shown[0]["status"] == "succeeded" and shown[0]["background"] is True
    assert [r["step"] for r in shown[0]["ranks"]] == [30, 30]
    # the cell's value, the run's handle, shows how the run ended in the saved notebook (its display is updated)
    handles = [o["data"]["text/plain"] for o in outputs(executed) if o.get("data", {}).get("text/plain", "")
               .startswith("<Run ")]
    assert handles and all(h.endswith(": done>") for h in handles), handles


def test_the_sweep_shows_its_table_its_best_run_and_its_saved_comparison(executed):
    values = [o["data"] for o in outputs(executed) if o.output_type == "execute_result"]
    table = next(v["text/plain"] for v in values if "value.loss" in v.get("text/plain", ""))
    assert table.count("done") == 6, table
    assert "best: {'lr': " in stream_text(executed)
    sweeps = [o["data"][SWEEP_MIME] for o in outputs(executed) if SWEEP_MIME in o.get("data", {})]
    assert len(sweeps) == 2 and sweeps[0]["status"] == "succeeded" and len(sweeps[0]["runs"]) == 6
    assert {tuple(sorted(r["params"].items())) for r in sweeps[0]["runs"]} == {
        (("lr", lr), ("width", w)) for lr in (0.3, 0.1, 0.01) for w in (4, 16)}
    # a slow kernel may drop old progress points (by design, oldest first), never the last one
    assert all(r["loss"] and r["loss"][-1][0] == 30 and len(r["loss"]) <= 30 for r in sweeps[0]["runs"]), sweeps


def test_the_search_stops_the_worse_members_early_and_its_saved_comparison_marks_them(executed):
    sweeps = [o["data"][SWEEP_MIME] for o in outputs(executed) if SWEEP_MIME in o.get("data", {})]
    search = sweeps[-1]
    assert search["search"] == "random" and search["early_stop"] == "asha" and search["trials"] == 8, search
    states = [r["state"] for r in search["runs"]]
    assert len(states) == 8 and set(states) <= {"done", "stopped_early"} and "stopped_early" in states, states
    assert "done" in states
    for r in search["runs"]:
        if r["state"] == "stopped_early":
            assert r["stopped_early_at"] in (4, 16) and r["why"].startswith("ASHA at step") and r["steps"] < 30, r
        else:
            assert r["steps"] == 30 and r["metric_last"] is not None, r
    assert search["best_id"] in {r["id"] for r in search["runs"] if r["state"] == "done"}
    assert search["scales"] == {"lr": "log", "width": "linear"} and len(search["best_so_far"]) == states.count("done")
    assert "members by state:" in stream_text(executed) and "'stopped_early'" in stream_text(executed)
