"""A search's comparison view (views/compare.py, views/effects.py): members stopped early read ``stopped early @
<step>``, the best member is marked, the header says what the sweep searches, and the HTML draws each parameter's
effect with everything from the snapshot escaped. A snapshot from before searches still renders."""
from __future__ import annotations

import re
from typing import Any

from jupyter_torchdist.views.compare import BEST_MARK, SweepReport, sweep_bundle, sweep_html, sweep_text


def _member(i: int, state: str, params: dict[str, Any], best: float | None, **extra: Any) -> dict[str, Any]:
    row = {"id": i, "params": params, "label": ", ".join(f"{k}={v}" for k, v in params.items()), "state": state,
           "step": 20, "total": 20, "rate": 3.0, "metrics": {"loss": best, "acc": 0.5}, "elapsed_s": 12.0,
           "loss": [[1, 1.0], [20, best or 1.0]], "value_repr": None, "error": None, "stopped_early_at": None,
           "why": None, "steps": 20, "metric_best": best, "metric_last": best, "past": False}
    row.update(extra)
    return row


def _snapshot() -> dict[str, Any]:
    runs = [
        _member(0, "done", {"lr": 0.1, "opt": "<b>"}, 0.30),
        _member(1, "stopped_early", {"lr": 0.001, "opt": "sgd"}, 0.90, stopped_early_at=9, steps=9,
                why="loss 0.9 is in the worst half at step 9"),
        _member(2, "failed", {"lr": 1.0, "opt": "sgd"}, None, error="RuntimeError: <nan>"),
        _member(3, "done", {"lr": 0.01, "opt": "adam"}, 0.12, past=True),
        _member(4, "running", {"lr": 0.05, "opt": "adam"}, 0.50, step=4, steps=4),
    ]
    return {"version": 1, "title": "%%distribute --sweep", "names": ["lr", "opt"], "status": "running",
            "elapsed_s": 40.0, "concurrent": 2, "runs": runs,
            "counts": {"queued": 0, "running": 1, "done": 2, "failed": 1, "stopped": 0, "stopped_early": 1},
            "metric": "loss", "mode": "min", "search": "random", "early_stop": "asha", "trials": 20, "best_id": 3,
            "scales": {"lr": "log", "opt": "category"}, "best_so_far": [[1, 0.3], [2, 0.3], [3, 0.12]]}


def _row(text: str, ident: int) -> str:
    return next(line for line in text.splitlines() if re.match(rf"{ident}\b", line))


def test_the_text_says_stopped_early_at_its_step_marks_the_best_and_names_the_search():
    text = sweep_text(_snapshot())
    assert "stopped early @ 9" in _row(text, 1)
    assert BEST_MARK in _row(text, 3) and BEST_MARK not in _row(text, 0)
    assert "done (past)" in _row(text, 3)
    assert "random search" in text and "loss (min)" in text and "early stop: asha" in text
    assert "4 of 20 members ended" in text  # done, stopped early, failed, past done: ended; the running one is not
    assert "loss 0.9 is in the worst half at step 9" in text and "RuntimeError: <nan>" in text
    head = text.splitlines()[2]
    assert "steps" in head and "loss best" in head and "loss last" in head
    assert " loss " not in f" {head} ".replace("loss best", "").replace("loss last", ""), "the metric shown once"
    assert "1 running, 2 done, 1 stopped early, 1 failed" in text


def test_the_html_draws_one_scatter_per_parameter_hollow_stopped_early_and_a_log_axis():
    page = sweep_html(_snapshot())
    assert page.count("aria-label=\"loss against ") == 2
    hollow = re.findall(r'<circle[^>]*fill="none"[^>]*data-state="(\w+)"', page)
    assert hollow and set(hollow) == {"stopped_early"}
    assert len(hollow) == 2, "the member stopped early in each scatter"
    assert ">lr (log)</text>" in page
    assert 'aria-label="best loss so far"' in page
    assert "data-state=\"failed\"" not in page and "data-state=\"running\"" not in page
    assert "stopped early @ 9" in page and "title='loss 0.9 is in the worst half at step 9'" in page


def test_the_html_escapes_what_the_snapshot_says():
    page = sweep_html(_snapshot())
    assert "<b>" not in page.replace("<b>parameter effect</b>", "").replace(
        f"<b>{'%%distribute --sweep: running, 1 running, 2 done, 1 stopped early, 1 failed'}</b>", "")
    assert "&lt;b&gt;" in page and "&lt;nan&gt;" in page


def test_a_snapshot_from_before_searches_still_renders():
    snap = _snapshot()
    for key in ("metric", "mode", "search", "early_stop", "trials", "best_id", "scales", "best_so_far"):
        del snap[key]
    for run in snap["runs"]:
        for key in ("stopped_early_at", "why", "steps", "metric_best", "metric_last", "past"):
            del run[key]
        run["state"] = "done" if run["state"] == "stopped_early" else run["state"]
    text, page = sweep_text(snap), sweep_html(snap)
    assert "members" not in text and BEST_MARK not in text and "search" not in text
    assert text.splitlines()[1].split() == ["run", "params", "state", "step", "loss", "acc", "time"]
    assert "parameter effect" not in page and "<table>" in page
    assert set(sweep_bundle(snap)) == {"application/vnd.jupyter-torchdist.sweep+json", "text/html", "text/plain"}
    assert repr(SweepReport({})).startswith("sweep: ")


def test_odd_values_neither_break_the_scales_nor_the_text():
    snap = _snapshot()
    snap["scales"] = {"lr": "log", "opt": "log"}  # a log scale over strings: drawn as categories
    snap["runs"][0]["params"]["lr"] = -1.0  # a log scale over a value <= 0: drawn linear
    snap["best_id"], snap["trials"], snap["counts"] = True, "many", {"done": "2"}
    page = sweep_html(snap)
    assert page.count("aria-label=\"loss against ") == 2 and ">lr (log)</text>" not in page
    assert BEST_MARK not in sweep_text(snap) and "members ended" not in sweep_text(snap)
