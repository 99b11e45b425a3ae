"""The code stays easy to read: small modules, short functions, code grouped by where it runs.

Limits: a module of at most MODULE_LINES lines and a function of at most FUNCTION_LINES (its body,
decorators and docstring included), for the package, the benchmarks and the front end's TypeScript; and for the
tests, files of at most MODULE_LINES lines, each test module in the folder of its layer (see tests/conftest.py).
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "jupyter_torchdist"
TESTS = ROOT / "tests"
MODULE_LINES = 400
FUNCTION_LINES = 40


def _python_files() -> list[Path]:
    return sorted([*PKG.rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")])


def _ts_files() -> list[Path]:
    return sorted((ROOT / "labextension" / "src").glob("*.ts"))


def test_no_module_is_too_long():
    long = {str(p.relative_to(ROOT)): n for p in _python_files() + _ts_files()
            if (n := len(p.read_text().splitlines())) > MODULE_LINES}
    assert not long, long


def test_no_test_file_is_too_long():
    long = {str(p.relative_to(ROOT)): n for p in sorted(TESTS.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MODULE_LINES}
    assert not long, long


def test_every_test_module_is_in_its_layers_folder():
    from ..conftest import LAYERS

    misplaced = [str(p.relative_to(ROOT)) for p in sorted(TESTS.rglob("test_*.py"))
                 if p.relative_to(TESTS).parts[0] not in LAYERS or len(p.relative_to(TESTS).parts) != 2]
    assert not misplaced, f"a test module belongs in one of tests/{{{','.join(LAYERS)}}}/: {misplaced}"
    assert all((TESTS / layer / "__init__.py").is_file() for layer in LAYERS)


def _python_functions(path: Path) -> list[tuple[str, int]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            out.append((f"{path.relative_to(ROOT)}:{node.lineno} {node.name}", node.end_lineno - start + 1))
    return out


_TS_START = re.compile(r"^(\s*)(?:export )?(?:async )?(?:function \w+|(?:private |public |static |get )*\w+\s*(?:=\s*)?"
                       r"\([^;]*$)")


def _ts_functions(path: Path) -> list[tuple[str, int]]:
    """Functions and methods: from their first line to the closing brace at the same indentation."""
    lines = path.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        m = _TS_START.match(line)
        if not m or line.strip().startswith(("if", "for", "while", "switch", "return", "//", "*")):
            continue
        indent = m.group(1)
        for j in range(i + 1, len(lines)):
            if lines[j].startswith(indent + "}") and not lines[j].startswith(indent + " "):
                out.append((f"{path.relative_to(ROOT)}:{i + 1} {line.strip()[:40]}", j - i + 1))
                break
    return out


def test_no_function_is_too_long():
    found = [f for p in _python_files() for f in _python_functions(p)]
    found += [f for p in _ts_files() for f in _ts_functions(p)]
    long = {name: n for name, n in found if n > FUNCTION_LINES}
    assert not long, long


def test_the_kernel_side_does_not_load_the_rank_runtime_and_the_rank_side_no_kernel_code():
    code = ("import sys, jupyter_torchdist as jt\n"
            "import jupyter_torchdist.kernel.runs.launch, jupyter_torchdist.kernel.magics.distribute\n"
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
