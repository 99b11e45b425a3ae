"""The code stays easy to read: modules by idea, code grouped by where it runs.

Modules follow ideas, not line counts (the old caps of 400 lines a module and 40 a function cut ideas apart and left
dozens of modules of a few lines): length is for review to judge. What is checked here: a module under TINY_LINES
lines is one of the few below, each with the reason it stands alone (anything else small belongs in the idea it was
cut from), each test module sits in the folder of its layer (see tests/conftest.py), and the kernel side loads no
rank runtime.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "jupyter_torchdist"
TESTS = ROOT / "tests"
TINY_LINES = 60
SMALL_ON_PURPOSE = {
    "jupyter_torchdist/rank/sweep_params.py": "the kernel imports it to build a sweep's payloads: no torch, no channel",
    "jupyter_torchdist/rank/allocator.py": "Spark data tasks tune their allocator too: no torch, no rank runtime",
    "jupyter_torchdist/rank/runtime.py": "what the rank-side API reads during a run: importable with nothing running",
    "jupyter_torchdist/views/display.py": "the live view without anywidget: importable where the widget's is not",
    "jupyter_torchdist/views/report.py": "the saved report's one entry point (its MIME bundle) over both renderers",
    "jupyter_torchdist/launchers/session/executors.py": "the doctor's task on every executor: Spark asked in one place",
    "jupyter_torchdist/horovod/compression.py": "Horovod's own layout (horovod/torch/compression.py)",
    "jupyter_torchdist/core/trackers.py": "the one list of trackers every part reads",
    "jupyter_torchdist/core/contract/detached.py": "the contract of the runner's socket, a channel of its own",
    "jupyter_torchdist/_detached.py": "a detached run's process, run by name: the one place it meets the panel",
}


def test_small_modules_are_small_on_purpose():
    tiny = sorted(str(p.relative_to(ROOT)) for p in PKG.rglob("*.py")
                  if p.name != "__init__.py" and len(p.read_text().splitlines()) < TINY_LINES)
    unexplained = [t for t in tiny if t not in SMALL_ON_PURPOSE]
    assert not unexplained, (f"package modules under {TINY_LINES} lines: {unexplained}. Merge each into the idea it "
                             "belongs to, or add it to SMALL_ON_PURPOSE with the reason it stands alone.")
    assert len(SMALL_ON_PURPOSE) <= 12, "at most a dozen small modules"


def test_every_test_module_is_in_its_layers_folder():
    from ..conftest import LAYERS

    misplaced = [str(p.relative_to(ROOT)) for p in sorted(TESTS.rglob("test_*.py"))
                 if p.relative_to(TESTS).parts[0] not in LAYERS or len(p.relative_to(TESTS).parts) != 2]
    assert not misplaced, f"a test module belongs in one of tests/{{{','.join(LAYERS)}}}/: {misplaced}"
    assert all((TESTS / layer / "__init__.py").is_file() for layer in LAYERS)


def test_the_kernel_side_does_not_load_the_rank_runtime_and_the_rank_side_no_kernel_code():
    code = ("import sys, jupyter_torchdist as jt\n"
            "import jupyter_torchdist.kernel.runs.driver, jupyter_torchdist.kernel.magics.distribute\n"
            "import jupyter_torchdist.launchers.spark\n"
            "import jupyter_torchdist.launchers.local\n"
            "print(sorted(m for m in sys.modules if m.startswith('jupyter_torchdist.rank.') "
            "and m not in ('jupyter_torchdist.rank.api', 'jupyter_torchdist.rank.forking', "
            "'jupyter_torchdist.rank.kept_payload', 'jupyter_torchdist.rank.sweep_params')))\n"
            "print('pyspark' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]", f"the kernel loaded rank runtime modules: {out[0]}"
    assert out[1] == "False", "pyspark is imported only where Spark is used"
    for path in (PKG / "rank").rglob("*.py"):
        text = path.read_text()
        assert "..kernel" not in text and "jupyter_torchdist.kernel" not in text, path.name
        assert "..views" not in text, path.name


def _checks_something(test: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """An assert, pytest.raises or pytest.fail, a raise, or a call of a helper named assert_* (one that asserts)."""
    for node in ast.walk(test):
        if isinstance(node, (ast.Assert, ast.Raise)):
            return True
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if name in ("pytest.raises", "pytest.fail") or name.split(".")[-1].lstrip("_").startswith("assert"):
                return True
    return False


def test_every_test_checks_something():
    """A test that cannot fail counts as passed while proving nothing: each one asserts, or calls what does."""
    idle = [f"{p.relative_to(ROOT)}::{node.name}" for p in sorted(TESTS.rglob("test_*.py"))
            for node in ast.walk(ast.parse(p.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")
            and not _checks_something(node)]
    assert not idle, f"tests that check nothing: {idle}"
    assert not _checks_something(ast.parse("def test_x():\n    print(1)\n").body[0])  # type: ignore[arg-type]
