"""The "Distributed runs" panel in a real JupyterLab (Chromium via Playwright), on real kernels and `--local` ranks.

Two notebooks each start a background run; the panel lists both, live, grouped by notebook, and so does
`jupyter-torchdist runs`; Stop in the panel ends one "stopped" in its notebook while the other trains on; a
notification names it, its notebook and how it ended, and its button opens the run's report in a tab; a sweep is one
row that opens to its members; a foreground run in a busy kernel stops from the panel too; a closed notebook's run
stays listed while its kernel trains, and "Cell" reopens the notebook at the run's cell; a detached run is listed with
"no kernel", its Attach adds a `%distribute_attach` cell to the notebook on show, its Stop ends it; a second server
with another runtime directory sees none of it; when the server goes, each kernel's file says it ended and no process
is left. One server and browser for the module (the two tests run in order on it). With
JUPYTER_TORCHDIST_DOCS_SHOT=1 the panel is also shot into docs/runs-panel.png.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from jupyter_torchdist.core.held_folder import registry_dir
from jupyter_torchdist.panel.registry import read_records

from ..support import ROOT
from ..support.browser import ARTIFACTS, LIVE, REPORT, Lab, notebook_json, skip_reason
from ..support.procs import all_gone, descendants_of
from ..support.runs_api import ApiServer, listed

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

TRAIN = ("%%distribute -n 2 --local --background\n"
         "import time\n"
         "import jupyter_torchdist as jt\n"
         "for step in range(1, 3001):\n"
         "    time.sleep(0.1)\n"
         "    jt.report(step=step, total=3000, loss=1.0 / step)\n"
         "'trained'")
SWEEP = ("%%distribute -n 1 --local --sweep \"lr=[0.1, 0.2]\" --concurrent 2\n"
         "import time\n"
         "import jupyter_torchdist as jt\n"
         "for step in range(1, 31):\n"
         "    time.sleep(0.1)\n"
         "    jt.report(step=step, total=30, loss=lr / step)")
FOREGROUND = TRAIN.replace(" --background", "")
DETACHED = TRAIN.replace(" --background", " --detach")
NOTEBOOKS = {"a.ipynb": ["%load_ext jupyter_torchdist", TRAIN, SWEEP],
             "b.ipynb": ["%load_ext jupyter_torchdist", TRAIN, FOREGROUND, "print('kernel alive:', 6 * 7)", DETACHED]}
PANEL = "#jupyter-torchdist-runs"


def _row(lab: Lab, run_id: str) -> Any:
    return lab.page.locator(f"{PANEL} .jp-TorchDist-runs-row[data-id='{run_id}']")


def _runs(lab: Lab, **kw: Any) -> dict[str, dict[str, Any]]:
    return {e["id"]: e for e in listed(lab.base, lab.token, **kw)}


def _wait_for(lab: Lab, what: Any, timeout: float = 120) -> dict[str, Any]:
    """The first run of the API's list that ``what(entry)`` accepts, once there is one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [e for e in _runs(lab).values() if what(e)]
        if found:
            return found[0]
        time.sleep(0.3)
    raise AssertionError(f"no such run within {timeout:g} s: {list(_runs(lab).values())}")


def _open(lab: Lab, name: str) -> None:
    """Open another notebook in the same page (a page load would reload the first)."""
    lab.page.evaluate("(p) => window.jupyterapp.commands.execute('docmanager:open', {path: p})", name)
    lab.page.wait_for_function(
        "(p) => { const w = window.jupyterapp.shell.currentWidget;"
        " return !!(w && w.context && w.context.path === p && w.content.widgets.length); }", arg=name, timeout=60_000)


def _start(lab: Lab) -> None:
    """The notebook on show: its %load_ext, then its background run (cell 1)."""
    lab.wait_idle_kernel()
    lab.run_cell(0)
    lab.cell(0).locator(".jp-InputArea-prompt:has-text('[1]')").wait_for(timeout=60_000)
    lab.run_cell(1)
    lab.cell(1).locator(LIVE).wait_for(timeout=60_000)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    lab = Lab(tmp_path_factory.mktemp("lab-runs"))
    for name, cells in NOTEBOOKS.items():
        (lab.root / name).write_text(json.dumps(notebook_json(cells)))
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        lab.start_server()
        lab.start_browser()
        lab.open("a.ipynb")
        _start(lab)
        _open(lab, "b.ipynb")
        _start(lab)
        lab.command("jupyter-torchdist:show-runs")
        yield lab
    finally:
        if lab.page is not None:
            try:
                lab.shot("runs-panel-last")
            except Exception:
                pass
        family = descendants_of(lab.proc.pid) if lab.proc is not None else set()
        lab.stop()
    assert all_gone(family), "a kernel, a rank or a server outlived the server"
    folder = registry_dir(lab.tmp / "runtime")
    ended = {r["kernel_id"]: r["ended"] is not None for r in read_records(folder)} if folder else {}
    runners = [k for k in ended if k.startswith("detached-")]
    assert len(runners) == 1 and all(ended.values()), f"each kernel, and the detached run's runner, says in its file " \
        f"that it ended: {ended}"


def _set_notifications(lab: Lab, on: bool) -> None:
    """The user's setting, saved as JupyterLab's Settings Editor saves it (its settings API)."""
    body = json.dumps({"raw": json.dumps({"notifications": on})}).encode()
    request = urllib.request.Request(f"{lab.base}/lab/api/settings/jupyter-torchdist:runs", data=body, method="PUT",
                                     headers={"Authorization": f"token {lab.token}",
                                              "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as r:
        assert r.status in (200, 204), r.status


def _steps(lab: Lab, run_id: str) -> str:
    return _row(lab, run_id).locator(".jp-TorchDist-runs-meta").inner_text().split(" ")[0]


def test_two_notebooks_runs_live_in_the_panel_and_a_stop_ends_one_while_the_other_trains(lab: Lab) -> None:
    a = _wait_for(lab, lambda e: e["notebook"] == "a.ipynb" and e["state"] == "running" and e["step"])
    b = _wait_for(lab, lambda e: e["notebook"] == "b.ipynb" and e["state"] == "running" and e["step"])
    groups = lab.page.locator(f"{PANEL} .jp-TorchDist-runs-groupName").all_inner_texts()
    assert sorted(groups) == ["a.ipynb", "b.ipynb"], groups
    before = {run: _steps(lab, run) for run in (a["id"], b["id"])}
    time.sleep(2.5)
    assert all(_steps(lab, run) != step for run, step in before.items()), f"the panel stood still: {before}"
    assert a["cell_id"] and a["kernel_id"] != b["kernel_id"] and a["backend"] == "local"

    cli = subprocess.run([sys.executable, "-m", "jupyter_torchdist", "runs", "--json"], capture_output=True,
                         text=True, timeout=60, env=dict(os.environ, JUPYTER_RUNTIME_DIR=str(lab.tmp / "runtime")))
    assert cli.returncode == 0, cli.stderr
    assert {e["id"] for e in json.loads(cli.stdout)} == set(_runs(lab)), "the command line lists the same runs"

    _row(lab, a["id"]).locator("button[data-action='stop']").click()
    _wait_for(lab, lambda e: e["id"] == a["id"] and e["state"] == "stopped", timeout=60)
    _row(lab, a["id"]).locator(".jp-TorchDist-runs-state[data-state='stopped']").wait_for(timeout=10_000)
    # the notification of a background run's end: the run, its notebook and its outcome (looked for every 5 s)
    toast = lab.page.locator(".Toastify__toast", has_text=f"run #{a['number']} ({a['id']}) in a.ipynb stopped")
    toast.wait_for(timeout=30_000)
    lab.page.locator(".lm-TabBar-tab:has-text('a.ipynb')").click()
    report = lab.cell(1).locator(f"{REPORT}[data-status='interrupted']")
    report.wait_for(timeout=60_000)
    assert "stopped by the runs panel" in report.inner_text()
    moving = _steps(lab, b["id"])
    time.sleep(1.5)
    assert _runs(lab)[b["id"]]["state"] == "running" and _steps(lab, b["id"]) != moving, "the other trains on"

    toast.locator("button", has_text="Report").click()   # the notification's button opens the run's report
    tab = lab.page.locator(f".jp-TorchDist-runsReport#jupyter-torchdist-report-{a['id']}")
    tab.locator(f"{REPORT}[data-status='interrupted']").wait_for(timeout=30_000)
    assert tab.locator(".jp-TorchDist-rank").count() == 2, "the run's own report: a row per rank"
    lab.shot("runs-panel-report-tab")

    lab.page.locator(".lm-TabBar-tab:has-text('a.ipynb')").click()
    lab.run_cell(2)
    sweep = _wait_for(lab, lambda e: e["kind"] == "sweep" and e["notebook"] == "a.ipynb")
    _row(lab, sweep["id"]).locator("button[data-action='toggle']").click()
    members = lab.page.locator(f"{PANEL} .jp-TorchDist-runs-members .jp-TorchDist-runs-row")
    members.nth(1).wait_for(timeout=60_000)
    assert sorted(members.locator(".jp-TorchDist-runs-title").all_inner_texts()) == ["lr=0.1", "lr=0.2"]
    _wait_for(lab, lambda e: e["id"] == sweep["id"] and e["state"] == "done", timeout=120)
    lab.page.mouse.move(0, 0)
    panel = lab.page.locator(PANEL)
    lab.shot("runs-panel", panel)
    if os.environ.get("JUPYTER_TORCHDIST_DOCS_SHOT") == "1":
        lab.page.locator(".lm-TabBar-tab:has-text('a.ipynb')").click()
        lab.page.screenshot(path=str(ROOT / "docs" / "runs-panel.png"), clip={"x": 0, "y": 0, "width": 1100,
                                                                             "height": 640})


def test_a_busy_kernels_foreground_run_stops_and_a_closed_notebooks_run_stays_listed(lab: Lab) -> None:
    lab.page.locator(".lm-TabBar-tab:has-text('b.ipynb')").click()
    lab.run_cell(2)
    fg = _wait_for(lab, lambda e: e["notebook"] == "b.ipynb" and not e["background"] and e["state"] == "running")
    assert lab.page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status") \
        == "busy"
    _row(lab, fg["id"]).locator("button[data-action='stop']").click()
    lab.cell(2).locator(".jp-OutputArea-output:has-text('RunInterrupted')").wait_for(timeout=60_000)
    assert _wait_for(lab, lambda e: e["id"] == fg["id"] and e["state"] == "stopped", timeout=30)
    lab.wait_idle_kernel()
    lab.run_cell(3)
    lab.cell(3).locator(".jp-OutputArea-output:has-text('kernel alive: 42')").wait_for(timeout=30_000)

    b = _wait_for(lab, lambda e: e["notebook"] == "b.ipynb" and e["background"] and e["state"] == "running")
    lab.page.evaluate("async () => { const w = window.jupyterapp.shell.currentWidget;"
                      " await w.context.save(); w.close(); }")
    lab.page.locator(".lm-TabBar-tab:has-text('b.ipynb')").wait_for(state="detached", timeout=30_000)
    before = _steps(lab, b["id"])
    time.sleep(2)
    assert _runs(lab)[b["id"]]["state"] == "running" and _steps(lab, b["id"]) != before, "closed, it trains on"

    _row(lab, b["id"]).locator("button[data-action='notebook']").click()
    lab.page.wait_for_function(
        "() => { const w = window.jupyterapp.shell.currentWidget;"
        " return !!(w && w.context && w.context.path === 'b.ipynb' && w.content.activeCellIndex === 1); }",
        timeout=30_000)

    # a detached run: listed with "no kernel"; Attach adds a cell that attaches to it; Stop ends it
    lab.wait_idle_kernel()   # the reopened notebook's kernel (JupyterLab may ask which first)
    lab.run_cell(0)          # its %load_ext again: a no-op on the kernel that kept running
    lab.wait_idle_kernel()
    lab.run_cell(4)
    detached = _wait_for(lab, lambda e: e.get("detached") and e["state"] == "running" and e["step"])
    assert detached["notebook"] == "b.ipynb" and detached["kernel_id"] == f"detached-{detached['id']}", detached
    row = _row(lab, detached["id"])
    assert row.locator(".jp-TorchDist-runs-detached").inner_text() == "no kernel"
    row.locator("button[data-action='attach']").click()
    lab.page.wait_for_function(
        "(src) => { const nb = window.jupyterapp.shell.currentWidget.content;"
        " return nb.widgets.length === 6 && nb.activeCell.model.sharedModel.getSource() === src; }",
        arg=f"%distribute_attach {detached['id']}", timeout=30_000)
    row.locator("button[data-action='stop']").click()
    _wait_for(lab, lambda e: e["id"] == detached["id"] and e["state"] == "stopped", timeout=60)
    # a detached run's end is announced as a background run's is
    lab.page.locator(".Toastify__toast", has_text=f"({detached['id']}) in b.ipynb stopped").wait_for(timeout=30_000)

    # off by the setting "notifications" (read as the page loads): a run that ends then is not announced
    _set_notifications(lab, False)
    lab.page.reload(wait_until="domcontentloaded")
    lab.page.wait_for_function("() => !!(window.jupyterapp && window.jupyterapp.shell)", timeout=60_000)
    time.sleep(6)   # the notifier's first look (at once, then every 5 s) sees b's run still training
    stop = subprocess.run([sys.executable, "-m", "jupyter_torchdist", "stop", b["id"]], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, JUPYTER_RUNTIME_DIR=str(lab.tmp / "runtime")))
    assert stop.returncode == 0, stop.stdout + stop.stderr
    _wait_for(lab, lambda e: e["id"] == b["id"] and e["state"] == "stopped", timeout=60)
    time.sleep(11)  # two more looks
    said = lab.page.locator(".Toastify__toast", has_text=f"({b['id']}) in b.ipynb")
    assert said.count() == 0, f"announced with notifications off: {said.all_inner_texts()}"

    (lab.tmp / "another-user").mkdir()
    other = ApiServer(lab.tmp / "another-user")
    try:
        assert json.loads(other.call("GET", "runs")[2]) == [], "another runtime directory: none of these runs"
        assert json.loads(other.call("GET", "runs?all=1")[2]) == []
    finally:
        other.stop()
    assert len(_runs(lab)) >= 5
