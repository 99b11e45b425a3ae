"""Run pages of the docs as a reader would: each page's python blocks in order, as the cells of a fresh notebook in a
real kernel (nbclient), ``%load_ext jupyter_torchdist`` first, in an empty folder of its own; several pages at once,
each in its own kernel.

What a page's run must show: no error in any block but the one a ``raises`` marker names (that one raises exactly
it), and no process of the kernel (ranks, JVM, workers, servers) left once the kernel is shut down.
"""
from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import ROOT
from .doc_pages import Block, blocks
from .procs import all_gone, descendants_of

LOAD = "%load_ext jupyter_torchdist"
CELL_TIMEOUT = 300  # seconds for one block; a page's own runs are small (a tiny model, synthetic data)


@dataclass
class PageRun:
    """What running one page left: each block run with its outputs, the blocks skipped, what went wrong."""

    page: Path
    ran: list[tuple[Block, list[dict[str, Any]]]] = field(default_factory=list)
    skipped: list[Block] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def name(self) -> str:
        return str(self.page.relative_to(ROOT))


def _error_text(out: dict[str, Any]) -> str:
    import re

    text = "\n".join(out.get("traceback", [])) or f"{out.get('ename')}: {out.get('evalue')}"
    return re.sub(r"\x1b\[[0-9;]*m", "", text)  # IPython's colours


def check(block: Block, outputs: list[dict[str, Any]]) -> str | None:
    """What is wrong with a block's outputs, or None."""
    errors = [o for o in outputs if o.get("output_type") == "error"]
    if block.raises is None:
        return f"{block.where} raised:\n{_error_text(errors[0])}" if errors else None
    if not errors:
        return f"{block.where} should raise {block.raises} (its marker says so) and did not"
    if errors[0].get("ename") != block.raises.rsplit(".", 1)[-1]:
        return f"{block.where} should raise {block.raises}, raised:\n{_error_text(errors[0])}"
    return None


async def run_page(page: Path, folder: Path) -> PageRun:
    """Run one page's blocks in a fresh kernel started in ``folder``; the kernel is shut down at the end and every
    process it started must be gone within 15 s."""
    import nbformat
    from nbclient import NotebookClient

    result = PageRun(page)
    page_blocks = blocks(page)
    result.skipped = [b for b in page_blocks if b.skip]
    todo = [b for b in page_blocks if not b.skip]
    if todo and todo[0].source.strip() == LOAD:
        todo = todo[1:]  # the page's own first cell is the one this runner adds
    if not todo:
        return result  # every block needs what CI lacks: no kernel to start
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(LOAD)] + [nbformat.v4.new_code_cell(b.source) for b in todo]
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(folder)}})
    t0 = time.monotonic()
    left: set[int] = set()
    try:
        async with client.async_setup_kernel(env=reader_env()):
            pid = client.km.provisioner.process.pid if client.km and client.km.provisioner else None
            for index, cell in enumerate(nb.cells):
                await client.async_execute_cell(cell, index)
            left = descendants_of(pid) if pid else set()
    except Exception as e:  # a cell past its timeout, a kernel that died: the page's failure, said as such
        result.problems.append(f"{result.name}: {type(e).__name__}: {e}")
    result.seconds = time.monotonic() - t0
    load_errors = [o for o in nb.cells[0].get("outputs", []) if o.get("output_type") == "error"]
    if load_errors:
        result.problems.append(f"{result.name}: {LOAD} failed:\n{_error_text(load_errors[0])}")
    for block, cell in zip(todo, nb.cells[1:]):
        outputs = [dict(o) for o in cell.get("outputs", [])]
        result.ran.append((block, outputs))
        problem = check(block, outputs)
        if problem:
            result.problems.append(problem)
            break  # the blocks after it ran on a page already broken: the first failure is the one to fix
    if left and not await asyncio.to_thread(all_gone, left, 15.0):
        result.problems.append(f"{result.name}: processes outlived the page's kernel: {sorted(left)}")
    return result


def reader_env() -> dict[str, str]:
    """The environment a reader's kernel has: this one's, less the test session's warm-up switch (tests/conftest.py
    turns the warm-up off for the kernels tests start themselves; a reader's notebook warms up as it loads)."""
    return {k: v for k, v in os.environ.items() if k != "JUPYTER_TORCHDIST_WARMUP"}


def run_pages(pages: list[Path], folder: Path, at_once: int = 2) -> dict[Path, PageRun]:
    """Run the pages, ``at_once`` kernels at a time (the longest first, by their number of blocks), each in a
    subfolder of ``folder``; by page."""
    return asyncio.run(run_pool(pages, [], folder, at_once))[0]


async def run_pool(pages: list[Path], notebooks: list[tuple[str, Any]], folder: Path,
                   at_once: int = 2) -> tuple[dict[Path, PageRun], dict[str, Any]]:
    """Pages and notebooks through one pool of ``at_once`` kernels, the longest first (by their cells), so the two
    cores stay busy to the end: the pages' runs by page, and by name what each notebook job returned (or raised).
    ``notebooks``: (name, an async job that executes it and returns the executed notebook)."""
    gate = asyncio.Semaphore(at_once)
    page_runs: dict[Path, PageRun] = {}
    executed: dict[str, Any] = {}

    async def page_job(i: int, page: Path) -> None:
        async with gate:
            sub = folder / f"{i:02d}-{page.stem}"
            sub.mkdir(parents=True, exist_ok=True)
            page_runs[page] = await run_page(page, sub)

    async def notebook_job(name: str, job: Any) -> None:
        async with gate:
            try:
                executed[name] = await job()
            except Exception as exc:  # raised in the test that reads this notebook
                executed[name] = exc

    jobs = [(len(blocks(p)), page_job(i, p)) for i, p in enumerate(pages)]
    jobs += [(getattr(job, "cells", 0), notebook_job(name, job)) for name, job in notebooks]
    await asyncio.gather(*(j for _, j in sorted(jobs, key=lambda cj: -cj[0])))
    return page_runs, executed


def main(argv: list[str]) -> int:
    """``python -m tests.support.doc_run PAGE...``: run pages as the doc test does and say what went wrong (exit 1)."""
    import tempfile

    runs = run_pages([Path(p).resolve() for p in argv], Path(tempfile.mkdtemp(prefix="doc-run-")))
    for run in runs.values():
        print(f"{run.name}: {run.seconds:.1f} s, {len(run.ran)} blocks run, {len(run.skipped)} skipped: "
              + ("ok" if not run.problems else "FAILED"))
        for problem in run.problems:
            print("  " + problem.replace("\n", "\n  "))
    return 1 if any(r.problems for r in runs.values()) else 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
