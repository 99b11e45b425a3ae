"""Background runs and a sweep in a real browser: JupyterLab on loopback, Chromium via Playwright.

A background run's live view keeps moving while another cell runs, and when the run ends the extension puts its
report in the view's place in the notebook (the saved notebook holds it); Stop in a background run's view stops that
run only, not the cell running meanwhile; a sweep shows one comparison view (a row per run, every run's loss on one
chart, a table sorted by a click, the failed run named) that becomes the saved sweep report. Screenshots go to
``test-artifacts/``.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from ..support.browser import LIVE, REPORT, ROW, Lab, serving, skip_reason

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

TRAIN = ("%%distribute -n 2 --local --background\n"
         "import time\n"
         "import jupyter_torchdist as jt\n"
         "steps = {steps}\n"
         "for step in range(1, steps + 1):\n"
         "    time.sleep(0.1)\n"
         "    jt.report(step=step, total=steps, loss=1.0 / step)\n"
         "'trained'")
CELLS = [
    "%load_ext jupyter_torchdist",
    TRAIN.format(steps=60),                                                   # 1: ends by itself
    "import time\ntime.sleep(4)\nprint('meanwhile:', 6 * 7)",                 # 2: a cell while it trains
    TRAIN.format(steps=3000),                                                 # 3: only Stop ends it
    "import time\ntime.sleep(10)\nprint('slept through')",                    # 4: runs while 3 is stopped
    "%%distribute -n 2 --local --sweep \"lr=[0.5, 1.0, 2.0]\" --concurrent 3\n"  # 5: a sweep, one run fails
    "import time\n"
    "import jupyter_torchdist as jt\n"
    "for step in range(1, 21):\n"
    "    time.sleep(0.1)\n"
    "    jt.report(step=step, total=20, loss=lr / step)\n"
    "    if lr == 2.0 and step == 10:\n"
    "        raise FloatingPointError('diverged at step 10')\n"
    "{'loss': lr / 20}",
    "from ipywidgets import Widget\n"                                          # 6: what the kernel still holds
    "print('open views:', sorted(type(w).__name__ for w in Widget.widgets.values() if 'Widget' in type(w).__name__"
    " and hasattr(w, 'report')))",
]
SWEEP_LIVE = f"{LIVE} .jp-TorchDist-sweep"
SWEEP_REPORT = ".jp-TorchDist-sweep:not(.jp-TorchDist-isLive)"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with serving(Lab(tmp_path_factory.mktemp("lab-background")), CELLS, "background-last") as lab:
        yield lab


def _outputs(lab: Lab, index: int) -> list[dict]:
    """Cell ``index``'s outputs as the notebook's model holds them (what a save writes)."""
    return json.loads(lab.page.evaluate(
        "(i) => JSON.stringify(window.jupyterapp.shell.currentWidget.content.widgets[i].model.outputs.toJSON())",
        index))


def _steps(cell) -> list[str]:
    return cell.locator(f"{LIVE} {ROW} .jp-TorchDist-steps").all_inner_texts()


def test_the_view_moves_while_another_cell_runs_then_becomes_the_report_in_the_notebook(lab: Lab) -> None:
    lab.wait_idle_kernel()
    lab.run_cell(1)
    run = lab.cell(1)
    run.locator(f"{LIVE} {ROW}").first.wait_for(timeout=120_000)
    lab.run_cell(2)
    other = lab.cell(2)
    run.locator(LIVE).scroll_into_view_if_needed()
    run.locator(f"{LIVE} {ROW}:has-text('/60')").first.wait_for(timeout=120_000)
    before = _steps(run)
    time.sleep(1.5)
    assert _steps(run) != before, "the view stood still while another cell ran"
    assert "run 1 in the background" in run.locator(f"{LIVE} .jp-TorchDist-meta").inner_text()
    other.locator(".jp-OutputArea-output:has-text('meanwhile: 42')").wait_for(timeout=60_000)
    lab.shot("background-live-while-another-cell-ran", run)
    report = run.locator(f"{REPORT}[data-status='succeeded']")
    report.wait_for(timeout=120_000)
    assert "'trained'" in report.inner_text()
    mimes = [o.get("data", {}) for o in _outputs(lab, 1)]
    assert any("application/vnd.jupyter-torchdist.run+json" in m for m in mimes), mimes
    assert not any("application/vnd.jupyter.widget-view+json" in m for m in mimes), "the widget is still there"
    lab.shot("background-report-in-place", run)


def test_stop_in_a_background_runs_view_stops_that_run_only(lab: Lab) -> None:
    lab.wait_idle_kernel()
    lab.run_cell(3)
    run = lab.cell(3)
    run.locator(LIVE).scroll_into_view_if_needed()
    run.locator(f"{LIVE} {ROW}:has-text('/3,000')").first.wait_for(timeout=120_000)
    lab.run_cell(4)
    time.sleep(1)
    button = run.locator(f"{LIVE} button.jp-TorchDist-stop")
    assert "only" in button.get_attribute("title"), "a background run's Stop stops it alone"
    button.click()
    report = run.locator(f"{REPORT}[data-status='interrupted']")
    report.wait_for(timeout=60_000)
    assert "stopped by the view's Stop" in report.inner_text()
    lab.cell(4).locator(".jp-OutputArea-output:has-text('slept through')").wait_for(timeout=60_000)
    lab.shot("background-stopped-by-its-view", run)


def test_a_sweeps_comparison_view_sorts_names_the_failed_run_and_is_saved(lab: Lab) -> None:
    lab.wait_idle_kernel()
    lab.run_cell(5)
    cell = lab.cell(5)
    cell.locator(SWEEP_LIVE).wait_for(timeout=120_000)
    cell.locator(SWEEP_LIVE).scroll_into_view_if_needed()
    cell.locator(f"{SWEEP_LIVE} tr.jp-TorchDist-row").nth(2).wait_for(timeout=60_000)
    cell.locator(f"{SWEEP_LIVE} .jp-TorchDist-chart polyline").nth(1).wait_for(timeout=120_000)
    lab.shot("sweep-live", cell)
    report = cell.locator(f"{SWEEP_REPORT}[data-status='failed']")
    report.wait_for(timeout=180_000)
    failure = report.locator(".jp-TorchDist-sweepFailure").inner_text()
    assert "lr=2.0" in failure and "FloatingPointError: diverged at step 10" in failure, failure
    assert report.locator("tr.jp-TorchDist-row").count() == 3
    assert report.locator(".jp-TorchDist-compareChart .jp-TorchDist-chart polyline").count() == 3
    # the parameter's effect: a point per finished run against lr, and the best loss as the runs finished
    assert report.locator(".jp-TorchDist-effects .jp-TorchDist-scatter").count() == 1
    assert report.locator(".jp-TorchDist-bestSoFar polyline").count() == 1
    report.locator("th[data-key='param:lr']").click()
    report.locator("th[data-key='param:lr']").click()  # twice: descending
    order = report.locator("tr.jp-TorchDist-row td.jp-TorchDist-param").all_inner_texts()
    assert order == ["2", "1", "0.5"], order
    mimes = [o.get("data", {}) for o in _outputs(lab, 5)]
    assert any("application/vnd.jupyter-torchdist.sweep+json" in m for m in mimes), mimes
    lab.shot("sweep-report", cell)


def test_a_finished_background_views_widget_is_closed_once_its_report_is_in_place(lab: Lab) -> None:
    """The extension tells the kernel when the report is in the view's place; the kernel closes the widget then, so
    finished runs and sweeps hold nothing for their views (run after the tests above: every view has ended)."""
    lab.wait_idle_kernel()
    lab.run_cell(6)
    closed = lab.cell(6).locator(".jp-OutputArea-output:has-text('open views: []')")
    closed.wait_for(timeout=30_000)
    assert closed.count() == 1
