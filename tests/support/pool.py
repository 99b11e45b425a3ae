"""Every notebook the tests execute as a reader would, through one pool: the example notebooks, the docs' pages (a
fresh kernel each, ``doc_run.py``) and the framework guides (one kernel, in order). Two kernels at a time, the
longest first, so both cores stay busy to the end; it runs once, when the first test asks for any of them, and each
test then reads what its notebook left. A notebook that failed to run raises in the tests that read it.

Their kernels load as a reader's do (the warm-up on: ``doc_run.reader_env``), each from its own folder: the
examples from ``examples/`` (their executed copies go to ``build/executed/`` for the docs), the pages and the guides
from empty folders of their own.
"""
from __future__ import annotations

import asyncio
import atexit
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from . import EXAMPLES, ROOT
from .doc_pages import blocks, pages
from .doc_run import PageRun, reader_env, run_pool

EXECUTED = ROOT / "build" / "executed"  # git-ignored; the docs render these copies (docs/conf.py)
GUIDES = ("lightning", "huggingface", "accelerate", "fsdp2", "deepspeed", "torchdistributor")
GUIDE_PAGES = {ROOT / "docs" / "frameworks" / f"{name}.md": name for name in GUIDES}
WIDGET_STATE = {"01_quickstart.ipynb"}  # examples whose widget state is kept (the quick start's test reads it)
_BLOCK = re.compile(r"^```ipython\n(.*?)^```$", re.S | re.M)
_done: dict[str, Any] | None = None


def guide_cells(name: str) -> list[str]:
    """A framework guide's cells: its ```ipython blocks, in order."""
    return [m.group(1).rstrip("\n") for m in _BLOCK.finditer((ROOT / "docs" / "frameworks" / f"{name}.md").read_text())]


def doc_pages() -> list[Path]:
    """The pages the doc test runs: every page with a python block, but the guides (run together, below)."""
    return [p for p in pages() if blocks(p) and p not in GUIDE_PAGES]


def example(name: str) -> Any:
    """``examples/<name>`` as executed (raises what stopped it)."""
    return _got(executed()["examples"][name])


def page_runs() -> dict[Path, PageRun]:
    return executed()["pages"]  # type: ignore[no-any-return]


def guides() -> dict[str, list[Any]]:
    """Every guide's cells as executed, by guide (the guides ran in one notebook, in order; errors stay in cells)."""
    nb = _got(executed()["guides"])
    return {name: [c for c in nb.cells if c.metadata.get("guide") == name] for name in GUIDES}


def _got(value: Any) -> Any:
    if isinstance(value, BaseException):
        raise value
    return value


def executed() -> dict[str, Any]:
    """Run the pool once; what it left: ``pages`` (by page), ``examples`` (by name), ``guides`` (the notebook)."""
    global _done
    if _done is None:
        from .deepspeed import build_deepspeed_cpu_ops

        build_deepspeed_cpu_ops()  # once, before two of the guides' ranks would race to compile it
        folder = Path(tempfile.mkdtemp(prefix="jtd-notebooks-"))
        atexit.register(shutil.rmtree, folder, True)
        jobs = [(p.name, _example_job(p.name)) for p in sorted(EXAMPLES.glob("*.ipynb"))]
        jobs.append(("guides", _guides_job(folder / "guides")))
        runs, done = asyncio.run(run_pool(doc_pages(), jobs, folder / "pages"))
        _done = {"pages": runs, "examples": {n: v for n, v in done.items() if n != "guides"},
                 "guides": done["guides"]}
    return _done


def _example_job(name: str) -> Any:
    import nbformat

    nb = nbformat.read(EXAMPLES / name, as_version=4)

    async def job() -> Any:
        from nbclient import NotebookClient

        await NotebookClient(nb, timeout=300, kernel_name="python3", store_widget_state=name in WIDGET_STATE,
                             resources={"metadata": {"path": str(EXAMPLES)}}).async_execute(env=reader_env())
        EXECUTED.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, str(EXECUTED / name))
        return nb

    job.cells = sum(c.cell_type == "code" for c in nb.cells)  # type: ignore[attr-defined]
    return job


def _guides_job(folder: Path) -> Any:
    import nbformat

    nb = nbformat.v4.new_notebook()
    for name in GUIDES:
        nb.cells += [nbformat.v4.new_code_cell(src, metadata={"guide": name}) for src in guide_cells(name)]

    async def job() -> Any:
        from nbclient import NotebookClient

        folder.mkdir(parents=True, exist_ok=True)
        await NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                             resources={"metadata": {"path": str(folder)}}).async_execute(env=reader_env())
        return nb

    job.cells = len(nb.cells) * 3  # its cells train whole frameworks: the longest job, started first
    return job
