"""The live view and the run report in Jupyter Notebook 7 (the ``notebook`` package), in a real browser.

Notebook 7 is a different application shell over the same JupyterLab components, and loads prebuilt
JupyterLab extensions: the anywidget live view, the Stop plugin and the run report's MIME renderer
should all work there. The server, browser and helpers are those of the Lab tests (``support/browser.py``),
pointed at ``python -m notebook`` and its ``/notebooks/`` pages. Screenshots go to ``test-artifacts/nb7-*``.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from ..support.browser import (CELLS, LIVE, REPORT, ROW, Lab, assert_stop_button_stops_the_run, row_states, serving,
                               skip_reason)

pytestmark = [pytest.mark.browser, pytest.mark.spark, pytest.mark.timeout(600)]

HTML_FALLBACK = ".jupyter-torchdist-report"  # the text/html fallback's root (run_report._html)


class Notebook7(Lab):
    """A Jupyter Notebook 7 server on 127.0.0.1 and one Chromium page on it."""

    APP = ("-m", "notebook", "--JupyterNotebookApp.expose_app_in_browser=True")
    DOC_URL = "notebooks"


def _notebook7_missing() -> str | None:
    try:
        import notebook
    except ImportError:
        return "Jupyter Notebook 7 is not installed (pip install -e '.[test]', or pip install 'notebook>=7')"
    version = getattr(notebook, "__version__", "0")
    if int(version.split(".")[0]) < 7:
        return f"the notebook package is {version}, not Notebook 7 (pip install 'notebook>=7')"
    return None


@pytest.fixture(scope="module")
def nb7(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Notebook7]:
    reason = skip_reason() or _notebook7_missing()
    if reason:
        pytest.skip(reason)
    # %load_ext, the 2-rank run with progress and a value, a run only the Stop button ends, a plain cell.
    with serving(Notebook7(tmp_path_factory.mktemp("nb7")), CELLS[:4], "nb7-last") as app:
        yield app


def test_it_is_notebook7_with_the_extension_loaded(nb7: Notebook7) -> None:
    page = nb7.page
    assert page.evaluate("() => window.jupyterapp.name") == "Jupyter Notebook"
    assert "/notebooks/" in page.url
    assert page.locator(".jp-LabShell").count() == 0, "this is the Notebook 7 shell, not JupyterLab's"
    assert page.locator("#main-panel .jp-NotebookPanel").count() == 1, "the notebook in Notebook 7's main panel"
    extensions = page.evaluate(
        "() => JSON.parse(document.getElementById('jupyter-config-data').textContent).federated_extensions"
        ".map(e => e.name)")
    assert "jupyter-torchdist" in extensions, extensions
    # The Stop plugin (plugin.ts) activated in this shell.
    assert page.evaluate("() => window.__jupyterTorchdistStop === true")


def test_live_rows_move_then_the_value_and_the_report_render(nb7: Notebook7) -> None:
    nb7.wait_idle_kernel()
    nb7.run_cell(1)
    cell = nb7.cell(1)
    cell.locator(f"{LIVE} {ROW}[data-state='running'] .jp-TorchDist-barFill").first.wait_for(timeout=240_000)
    first = row_states(nb7, 1)
    assert [r["rank"] for r in first] == ["0", "1"], first
    second, deadline = first, time.monotonic() + 20
    while second == first and time.monotonic() < deadline:
        time.sleep(0.3)
        second = row_states(nb7, 1)
    nb7.shot("nb7-live-2-ranks", cell)
    nb7.shot("nb7-live-page")
    assert any(a["steps"] != b["steps"] and a["bar"] != b["bar"] for a, b in zip(first, second)), \
        f"the rows did not move: {first} then {second}"
    assert cell.locator(f"{LIVE} .jp-TorchDist-loss svg polyline").count() == 2, "a loss curve per rank"

    # After the run: the report drawn by the extension's MIME renderer, in place of the widget.
    cell.locator(f"{REPORT}[data-status='succeeded']").wait_for(timeout=120_000)
    assert cell.locator(LIVE).count() == 0, "the widget was replaced by the report"
    # The renderer widget (RunReportRenderer, class jp-TorchDist) is the output itself; JupyterLab's
    # built-in renderers mark theirs with data-mime-type, so the HTML fallback would be text/html.
    assert cell.locator(f".jp-OutputArea-output.jp-TorchDist {REPORT}").count() == 1
    assert cell.locator(HTML_FALLBACK).count() == 0, "the MIME renderer drew it, not the HTML fallback"
    mimes = cell.locator(".jp-OutputArea-output").evaluate_all("os => os.map(o => o.dataset.mimeType || null)")
    assert "text/html" not in mimes, mimes
    report = cell.locator(REPORT)
    assert report.count() == 1
    assert report.locator(f"{ROW}[data-state='done']").count() == 2
    assert report.locator(".jp-TorchDist-steps").all_inner_texts() == ["40/40", "40/40"]
    assert "'answer': 42" in report.locator(".jp-TorchDist-valuePre").inner_text()
    assert cell.locator(".jp-TorchDist-loss svg polyline").count() == 2, "the report's loss curves"

    # The value, as the cell's own output (the execute result, after the report).
    value = cell.locator(".jp-OutputArea-executeResult").inner_text()
    assert "{'answer': 42, 'rank': 0}" in value, value
    nb7.shot("nb7-report-succeeded", cell)


def test_stop_button_interrupts_the_run(nb7: Notebook7) -> None:
    """The Stop button goes through the plugin (plugin.ts): it finds the notebook in the shell's main area."""
    assert_stop_button_stops_the_run(nb7, "nb7-report-stopped")


def test_the_runs_panel_opens_in_the_left_sidebar(nb7: Notebook7) -> None:
    """Notebook 7 has the "Distributed runs" panel too (View, Left Sidebar, Show Distributed runs: its caption), with
    this notebook's runs as the kernel ended them (the tree page's shell has the same sidebar)."""
    page = nb7.page
    page.evaluate("() => window.jupyterapp.commands.execute('jupyter-torchdist:show-runs')")
    panel = page.locator("#jupyter-torchdist-runs")
    panel.locator(".jp-TorchDist-runs-row[data-state='stopped']").wait_for(timeout=30_000)
    assert panel.locator(".jp-TorchDist-runs-groupName").all_inner_texts() == ["views.ipynb"]
    states = panel.locator(".jp-TorchDist-runs-row").evaluate_all("rs => rs.map(r => r.dataset.state)")
    assert sorted(states) == ["done", "stopped"], states
    nb7.shot("nb7-runs-panel")
