"""The browser tests' harness: a JupyterLab (or Notebook 7) server on loopback and one Chromium page on it via
Playwright, the notebook they run, and checks shared by the JupyterLab and Notebook 7 tests. Screenshots go to
``test-artifacts/``."""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import ROOT

ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("JUPYTER_TORCHDIST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
NOTEBOOK = "views.ipynb"
LIVE = ".jp-TorchDist-widget"                          # the anywidget live view
REPORT = ".jp-TorchDist-report:not(.jp-TorchDist-isLive)"  # the saved report (MIME renderer)
ROW = ".jp-TorchDist-rank"
MANY_SPEC = "steps=600,every=0.1,hosts=16,fail_rank=700,fail_at=30"  # what cells 6-8's simulated ranks do

CELLS = [
    "%load_ext jupyter_torchdist",
    # 1: a few seconds of progress with a loss, some output, a value; steps 5 to 7 profiled
    "%%distribute -n 2 --profile 5:8\n"
    "import time\n"
    "import jupyter_torchdist as jt\n"
    "steps = 40\n"
    "for step in range(1, steps + 1):\n"
    "    time.sleep(0.12)\n"
    "    jt.report(step=step, total=steps, loss=1.0 / step)\n"
    "    if step % 10 == 0:\n"
    "        print(f'rank {jt.rank()} at step {step}')\n"
    "{'answer': 6 * 7, 'rank': jt.rank()}",
    # 2: long enough that only the stop button ends it
    "%%distribute -n 2\n"
    "import time\n"
    "import jupyter_torchdist as jt\n"
    "for step in range(1, 1201):\n"
    "    time.sleep(0.1)\n"
    "    jt.report(step=step, total=1200)",
    # 3: the kernel still works after the stop
    "print('kernel alive:', 6 * 7)",
    # 4: rank 1 fails
    "%%distribute -n 2\n"
    "import time\n"
    "import jupyter_torchdist as jt\n"
    "for step in range(1, 6):\n"
    "    jt.report(step=step, total=5)\n"
    "    time.sleep(0.05)\n"
    "    if jt.rank() == 1 and step == 3:\n"
    "        raise ValueError('boom at step 3, on purpose')",
    # 5: the live view with 64 ranks. The kernel side is the real one (RunState folding rank messages,
    # LiveView syncing trimmed snapshots over the widget comm at 10 updates a second); only the 64 ranks
    # are simulated, which 2 cores could not run. It goes on until the test writes FINISH_64.
    "import os, time\n"
    "from jupyter_torchdist.kernel.state.run import RunState\n"
    "from jupyter_torchdist.views.live import LiveView\n"
    "n, total = 64, 3000\n"
    "st = RunState(n, title='%%distribute -n 64 (simulated ranks)', backend='simulated', started_at=0.0)\n"
    "view = LiveView()\n"
    "for r in range(n):\n"
    "    st.apply(r, 'rank', {'t': 'hello', 'host': f'worker-{r // 8}'}, 0.0)\n"
    "    st.apply(r, 'rank', {'t': 'state', 'state': 'running'}, 0.0)\n"
    "view.start(st.snapshot(log_tail=view.log_tail))\n"
    "t0 = time.monotonic()\n"
    "for step in range(1, total + 1):\n"
    "    time.sleep(0.1)\n"
    "    st.now = time.monotonic() - t0\n"
    "    for r in range(n):\n"
    "        st.apply(r, 'rank', {'t': 'progress', 'step': step, 'total': total,\n"
    "                             'metrics': {'loss': 2.0 / (step + r % 8), 'lr': 0.001}}, st.now)\n"
    "        st.apply(r, 'rank', {'t': 'log', 'text': f'rank {r} line {step}'}, st.now)\n"
    "    view.update(st.snapshot(log_tail=view.log_tail))\n"
    "    if os.path.exists('FINISH_64'):\n"
    "        break\n"
    "for r in range(n):\n"
    "    st.apply(r, 'rank', {'t': 'result', 'repr': repr(step)}, st.now)\n"
    "st.status, st.ended_at = 'succeeded', st.now\n"
    "view.finish(st.snapshot(log_tail=view.log_tail))",
    # 6-8: 1,024 simulated ranks over 16 hosts (the real kernel side, simulated ranks: tests/support/simulated.py);
    # rank 700 raises 30 s in. A many-rank run is drawn as a summary and a paged table.
    f"import os\nos.environ['JUPYTER_TORCHDIST_SIMULATE'] = {MANY_SPEC!r}\n"
    f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
    "from tests.support import simulated\nsimulated.enable()  # a test double: tests register it, the package has none",
    "%%distribute -n 1024\npass",
    "del os.environ['JUPYTER_TORCHDIST_SIMULATE']",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def notebook_json(cells: list[str]) -> dict[str, Any]:
    return {
        "nbformat": 4, "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "source": src, "outputs": [],
                   "execution_count": None} for i, src in enumerate(cells)],
    }


class Lab:
    """A JupyterLab server on 127.0.0.1 and one Chromium page on it."""

    # What runs the server (after the Python), and where a notebook opens: a subclass can run another front end.
    APP = ("-m", "jupyterlab", "--LabApp.expose_app_in_browser=True")
    DOC_URL = "lab/tree"

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.root = tmp / "root"
        self.root.mkdir()
        self.port = _free_port()
        self.token = secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.browser: Any = None
        self.page: Any = None
        self._pw: Any = None

    # -- server ---------------------------------------------------------------------------------
    def start_server(self) -> None:
        config = self.tmp / "config"
        (config / "labconfig").mkdir(parents=True)
        (config / "labconfig" / "page_config.json").write_text(json.dumps(
            {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
        env = dict(os.environ, JUPYTER_CONFIG_DIR=str(config), JUPYTER_RUNTIME_DIR=str(self.tmp / "runtime"))
        env["JUPYTER_PATH"] = os.pathsep.join(filter(None, [self._checkout_labextension(), env.get("JUPYTER_PATH")]))
        env.pop("JUPYTER_TORCHDIST_WARMUP", None)  # as a user has it: Spark warms up on %load_ext
        self.log = open(self.tmp / "server.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, *self.APP, "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
             f"--IdentityProvider.token={self.token}",
             f"--ServerApp.root_dir={self.root}", "--allow-root", "--ServerApp.open_browser=False"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.APP[1]} exited: {(self.tmp / 'server.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.api("status"), timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"{self.APP[1]} did not answer in 60 s")

    def _checkout_labextension(self) -> str | None:
        """A data folder whose labextension is this checkout's build, found before any installed copy (JupyterLab
        takes an extension from the first folder that has it): the browser tests test the code they sit beside."""
        built = ROOT / "jupyter_torchdist" / "labextension"
        if not (built / "package.json").is_file():
            return None
        data = self.tmp / "jupyter-data"
        (data / "labextensions").mkdir(parents=True, exist_ok=True)
        link = data / "labextensions" / "jupyter-torchdist"
        if not link.exists():
            link.symlink_to(built, target_is_directory=True)
        return str(data)

    def api(self, path: str) -> str:
        return f"{self.base}/api/{path}?token={self.token}"

    def kernels(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(self.api("kernels"), timeout=5) as r:
            return json.load(r)

    # -- browser --------------------------------------------------------------------------------
    def start_browser(self) -> None:
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS,
                                                headless=True)
        context = self.browser.new_context(viewport={"width": 1400, "height": 1000})
        self.page = context.new_page()
        self.page.set_default_timeout(30_000)

    def open(self, name: str) -> None:
        self.page.goto(f"{self.base}/{self.DOC_URL}/{name}?token={self.token}", wait_until="domcontentloaded",
                       timeout=120_000)
        self.page.wait_for_function(
            "() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
            " return !!(w && w.content && w.content.widgets && w.content.widgets.length); }",
            timeout=60_000)

    def wait_idle_kernel(self, timeout: float = 60) -> None:
        accept = self.page.locator(".jp-Dialog:has-text('Select Kernel') .jp-mod-accept")
        if accept.count():
            accept.click()  # JupyterLab sometimes asks for the kernel the notebook names: the default one
        self.page.wait_for_function(
            "() => { const w = window.jupyterapp.shell.currentWidget;"
            " const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;"
            " return !!k && k.status === 'idle'; }", timeout=timeout * 1000)

    def run_cell(self, index: int) -> None:
        """Start cell ``index`` (not waiting for it): as the user's Shift-Enter would, minus typing."""
        self.page.evaluate(
            "(i) => { const app = window.jupyterapp; const nb = app.shell.currentWidget.content;"
            " nb.activeCellIndex = i; nb.deselectAll(); app.commands.execute('notebook:run-cell'); }", index)
        self.cell(index).scroll_into_view_if_needed()  # a live view out of sight draws nothing until seen (widget.ts)

    def command(self, name: str) -> None:
        self.page.evaluate("(c) => window.jupyterapp.commands.execute(c)", name)

    def cell(self, index: int) -> Any:
        # In the notebook on show: other notebooks' tabs stay in the page, hidden.
        return self.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-CodeCell").nth(index)

    def shot(self, name: str, target: Any = None) -> Path:
        path = ARTIFACTS / f"{name}.png"
        (target or self.page).screenshot(path=str(path))
        return path

    def stop(self) -> None:
        for close in (lambda: self.browser and self.browser.close(), lambda: self._pw and self._pw.stop()):
            try:
                close()
            except Exception:
                pass
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # the server shuts its kernels down
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if getattr(self, "log", None):
            self.log.close()


def skip_reason() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Python playwright is not installed (pip install -e '.[test]')"
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        return "JupyterLab is not installed (pip install -e '.[test]')"
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium, or .ci/setup --browser)"
    from jupyter_torchdist.views.live import live_available

    if not live_available():
        return "the live view's front end is not built (cd labextension && jlpm build:prod)"
    return None


@contextlib.contextmanager
def serving(app: Lab, cells: list[str], last_shot: str) -> Iterator[Lab]:
    """Server and browser up, the notebook open with its first cell (%load_ext) run; all stopped after,
    with a last screenshot for whoever debugs a failure. Shared by the JupyterLab and Notebook 7 tests."""
    ARTIFACTS.mkdir(exist_ok=True)
    (app.root / NOTEBOOK).write_text(json.dumps(notebook_json(cells)))
    try:
        app.start_server()
        app.start_browser()
        app.open(NOTEBOOK)
        app.wait_idle_kernel()
        app.run_cell(0)
        app.cell(0).locator(".jp-InputArea-prompt:has-text('[1]')").wait_for(timeout=60_000)
        yield app
    finally:
        if app.page is not None:
            try:
                app.shot(last_shot)
            except Exception:
                pass
        app.stop()


def row_states(lab: Lab, index: int) -> list[dict[str, Any]]:
    """What each rank's row in cell ``index``'s live view shows now."""
    return lab.cell(index).locator(f"{LIVE} {ROW}").evaluate_all(
        "rows => rows.map(r => ({rank: r.dataset.rank, state: r.dataset.state,"
        " steps: (r.querySelector('.jp-TorchDist-steps') || {}).textContent,"
        " bar: (r.querySelector('.jp-TorchDist-barFill') || {style: {}}).style.width}))")


def assert_stop_button_stops_the_run(app: Lab, shot: str) -> None:
    """Cell 2 runs long; its Stop button (through plugin.ts) stops every rank and the kernel stays usable.
    Shared by the JupyterLab and Notebook 7 tests."""
    app.wait_idle_kernel()
    app.run_cell(2)
    cell = app.cell(2)
    cell.locator(f"{LIVE} {ROW}[data-state='running']").first.wait_for(timeout=240_000)
    stop = cell.locator(f"{LIVE} button.jp-TorchDist-stop")
    assert stop.is_enabled() and cell.locator(f"{LIVE} .jp-TorchDist-stopHint").count() == 0
    clicked = time.monotonic()
    stop.click()
    cell.locator(".jp-OutputArea-output:has-text('RunInterrupted')").wait_for(timeout=60_000)
    took = time.monotonic() - clicked
    report = cell.locator(f"{REPORT}[data-status='interrupted']")
    report.wait_for(timeout=10_000)
    app.shot(shot, cell)
    steps = report.locator(".jp-TorchDist-steps").all_inner_texts()
    assert all(s != "1200/1200" for s in steps), steps
    assert report.locator(f"{ROW}[data-state='stopped']").count() == 2
    assert took < 45, f"the run took {took:.1f} s to stop"

    app.wait_idle_kernel()
    app.run_cell(3)
    app.cell(3).locator(".jp-OutputArea-output:has-text('kernel alive: 42')").wait_for(timeout=30_000)

