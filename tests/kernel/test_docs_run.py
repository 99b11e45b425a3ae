"""Every python block of the docs and the README runs as written (issue 53): each page's blocks in order, in a fresh
kernel with ``%load_ext jupyter_torchdist`` first, in an empty folder, two pages at a time. A block that needs what
CI lacks (a GPU, a cluster the page names) carries a marker and a note the reader sees, and is the only kind not run
(``tests/support/doc_pages.py``); a block that shows a failure on purpose must raise what its marker names.

The framework guides run in ``test_framework_guides.py`` (their frameworks are installed there and their runs
checked in detail); this test checks that every python block of those pages is one that test runs.
"""
from __future__ import annotations

import pytest

from ..support import ROOT
from ..support.doc_pages import blocks
from ..support.doc_run import PageRun
from ..support.notebooks import POOLED
from ..support.pool import GUIDE_PAGES, doc_pages, guide_cells
from ..support.pool import page_runs as pooled_page_runs

# pages use the embedded session as a reader's notebook does; they run in the pool of every notebook the tests run
# (support/pool.py), which the first test to read one of them starts
pytestmark = [pytest.mark.spark, POOLED]

PAGES = doc_pages()


@pytest.fixture(scope="module")
def page_runs() -> dict:
    runs = pooled_page_runs()
    for run in sorted(runs.values(), key=lambda r: -r.seconds):
        print(f"{run.seconds:6.1f} s  {run.name}: {len(run.ran)} blocks run, {len(run.skipped)} skipped")
    return runs


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_page_runs_as_written(page_runs: dict, page) -> None:
    run: PageRun = page_runs[page]
    assert not run.problems, "\n\n".join(run.problems)
    if not run.ran:
        pytest.skip(f"every block of {run.name} needs what CI lacks: "
                    + "; ".join(f"{b.where} ({b.skip})" for b in run.skipped))


@pytest.mark.parametrize("page", sorted(GUIDE_PAGES), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_block_of_a_framework_guide_is_run_by_the_guides_test(page) -> None:
    ran = [b.source for b in blocks(page) if not b.skip]
    assert ran == guide_cells(GUIDE_PAGES[page]), \
        f"{page.relative_to(ROOT)}: its python blocks are not exactly the ```ipython cells test_framework_guides runs"
