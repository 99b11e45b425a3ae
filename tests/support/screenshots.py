"""The docs' screenshots, made from the real UI: JupyterLab in Chromium (the browser tests' harness), a notebook run
as a user runs it, the live view caught while the ranks train (``docs/live.png``) and the saved report of a failed
run (``docs/report.png``). Run by ``bash .ci/screenshots`` (and by ``.ci/gallery``, which refreshes them with the
gallery); each shot is checked for what it must show before it is written.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from . import ROOT
from .browser import LIVE, REPORT, Lab, row_states, serving, skip_reason

DOCS = ROOT / "docs"

# the embedded session up (spark_session() waits for it) and warm, so the shot shows where runs go
WARM = "import jupyter_torchdist as jt\njt.spark_session()\njt.run(lambda: 1, n=2)"
LIVE_CELL = """\
%%distribute -n 2
import time
import torch
import jupyter_torchdist
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(torch.nn.Linear(10, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(400):
    x = torch.randn(32, 10)
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    jupyter_torchdist.report(step=step + 1, total=400, loss=loss)
    if step % 50 == 0:
        print(f"step {step}: loss {loss.item():.4f}")
    time.sleep(0.03)
round(loss.item(), 4)"""
FAILING_CELL = """\
%%distribute -n 2
import torch
import jupyter_torchdist as jt
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(torch.nn.Linear(10, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(60):
    x = torch.randn(32, 10)
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    jt.report(step=step + 1, total=60, loss=loss)
    if jt.rank() == 1 and step == 40:
        scale = 1 / (step - 40)          # a bug on rank 1: the report names it, with this line
round(loss.item(), 4)"""


def _live_shot(lab: Lab, index: int, out: Path) -> None:
    """Wait until both ranks train and the curve has points, then shoot the live view."""
    lab.run_cell(index)
    view = lab.cell(index).locator(LIVE)
    view.wait_for(timeout=120_000)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        rows = row_states(lab, index)
        if len(rows) == 2 and all(r["state"] == "running" for r in rows) and "step 100" in view.inner_text():
            break
        time.sleep(0.2)
    else:
        raise RuntimeError(f"the live view never showed two ranks training: {row_states(lab, index)}")
    text = view.inner_text()
    assert "local[256]" in text, f"the shot should show the embedded session: {text[:300]}"
    view.screenshot(path=str(out))
    lab.cell(index).locator(REPORT).wait_for(timeout=120_000)  # let it end before the next cell


def _report_shot(lab: Lab, index: int, out: Path) -> None:
    lab.run_cell(index)
    report = lab.cell(index).locator(REPORT)
    report.wait_for(timeout=120_000)
    text = report.inner_text()
    assert "ZeroDivisionError" in text and "Cell In[" in text and "<distribute cell>" not in text, text[:600]
    report.screenshot(path=str(out))


def make(folder: Path) -> list[Path]:
    """Both shots, written to docs/ once each was checked; the paths written."""
    why = skip_reason()
    if why:
        raise SystemExit(f"cannot make the screenshots: {why}")
    lab = Lab(folder)
    made = [folder / "live.png", folder / "report.png"]
    with serving(lab, ["%load_ext jupyter_torchdist", WARM, LIVE_CELL, FAILING_CELL], "screenshots-last"):
        lab.run_cell(1)
        lab.cell(1).locator(".jp-InputArea-prompt:has-text('[2]')").wait_for(timeout=180_000)
        _live_shot(lab, 2, made[0])
        _report_shot(lab, 3, made[1])
    written = []
    for shot in made:
        shutil.copyfile(shot, DOCS / shot.name)
        written.append(DOCS / shot.name)
    return written


if __name__ == "__main__":
    for path in make(Path(tempfile.mkdtemp(prefix="jtd-screenshots-"))):
        print(f"wrote {path.relative_to(ROOT)}")
    sys.exit(0)
