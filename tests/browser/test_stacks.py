"""The Stacks control and the stall notice in a real browser: JupyterLab on loopback, Chromium via Playwright.

A rank-divergent collective (rank 0 in all_reduce, rank 1 sleeping) runs in the live view: pressing Stacks shows
where each rank is while the run goes on (the request reaches the busy kernel through the plugin and the
kernel's control channel), Stop then ends it with the places kept in the report; with --stall-after the view
says the run is stalled by itself and opens the same picture. Screenshots go to ``test-artifacts/``.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from ..support.browser import LIVE, REPORT, ROW, Lab, serving, skip_reason

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

HANG = ("%%distribute -n 2 --local {opts}\n"
        "import time, torch, torch.distributed as dist\n"
        "t = torch.ones(1)\n"
        "print('entering', flush=True)\n"
        "if dist.get_rank() == 0:\n"
        "    dist.all_reduce(t)\n"
        "else:\n"
        "    time.sleep(300)\n")
CELLS = ["%load_ext jupyter_torchdist", HANG.format(opts="--timeout 240"),
         HANG.format(opts="--timeout 60 --stall-after 5"), "print('kernel alive:', 6 * 7)"]
PLACE = ".jp-TorchDist-place[data-rank='{rank}'] .jp-TorchDist-placeSummary"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with serving(Lab(tmp_path_factory.mktemp("lab-stacks")), CELLS, "stacks-last") as lab:
        yield lab


def _hanging(lab: Lab, index: int):
    lab.wait_idle_kernel()
    lab.run_cell(index)
    cell = lab.cell(index)
    cell.locator(LIVE).wait_for(timeout=240_000)
    cell.locator(LIVE).scroll_into_view_if_needed()  # a view out of sight does not draw (widget.ts)
    cell.locator(f"{LIVE} {ROW}[data-rank='1']:has-text('entering')").wait_for(timeout=240_000)
    return cell


def test_stacks_shows_where_each_rank_is_and_stop_keeps_it_in_the_report(lab: Lab) -> None:
    cell = _hanging(lab, 1)
    time.sleep(2)
    button = cell.locator(f"{LIVE} button.jp-TorchDist-stacksButton")
    assert button.is_enabled(), "the plugin carries the request"
    pressed = time.monotonic()
    button.click()
    rank0 = cell.locator(f"{LIVE} " + PLACE.format(rank=0))
    rank0.wait_for(timeout=20_000)
    took = time.monotonic() - pressed
    assert rank0.inner_text().startswith("waiting in all_reduce at cell line 6 for "), rank0.inner_text()
    assert cell.locator(f"{LIVE} " + PLACE.format(rank=1)).inner_text() == "in time.sleep at cell line 8"
    stack = cell.locator(f"{LIVE} .jp-TorchDist-place[data-rank='0'] .jp-TorchDist-stack").inner_text()
    assert "cell line 6  dist.all_reduce(t)" in stack and "library frame" in stack, stack
    assert cell.locator(f"{LIVE} {ROW}[data-state='running']").count() == 2, "asking did not disturb the run"
    lab.shot("live-stacks", cell)
    assert took < 10, f"the stacks took {took:.1f} s to show"

    cell.locator(f"{LIVE} button.jp-TorchDist-stop").click()
    report = cell.locator(f"{REPORT}[data-status='interrupted']")
    report.wait_for(timeout=60_000)
    assert report.locator(".jp-TorchDist-stacks").evaluate("d => d.open"), "a stopped run opens where ranks were"
    assert "Where each rank was" in report.locator(".jp-TorchDist-stacks summary").inner_text()
    assert report.locator(PLACE.format(rank=1)).inner_text() == "in time.sleep at cell line 8"
    error = cell.locator(".jp-OutputArea-output:has-text('RunInterrupted')").inner_text()
    assert "rank 0: waiting in all_reduce at cell line 6" in error, error
    lab.shot("report-stopped-places", cell)


def test_a_stall_is_said_in_the_view_with_every_ranks_place(lab: Lab) -> None:
    cell = _hanging(lab, 2)
    entered = time.monotonic()
    stall = cell.locator(f"{LIVE} .jp-TorchDist-stall")
    stall.wait_for(timeout=30_000)
    took = time.monotonic() - entered
    assert "stalled: no rank has made progress" in stall.inner_text()
    cell.locator(f"{LIVE} " + PLACE.format(rank=1)).wait_for(timeout=10_000)
    assert cell.locator(f"{LIVE} .jp-TorchDist-stacks").evaluate("d => d.open")
    lab.shot("live-stalled", cell)
    assert took < 5 + 5, f"the stall showed {took:.1f} s after the hang began (threshold 5 s)"
    cell.locator(f"{LIVE} button.jp-TorchDist-stop").click()
    cell.locator(f"{REPORT}[data-status='interrupted']").wait_for(timeout=60_000)
    lab.wait_idle_kernel()
    lab.run_cell(3)
    lab.cell(3).locator(".jp-OutputArea-output:has-text('kernel alive: 42')").wait_for(timeout=30_000)
