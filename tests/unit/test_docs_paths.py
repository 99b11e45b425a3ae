"""The README and the docs name real files: every repo path written in backticks exists, every relative link of the
README resolves, and the README's test command and cluster recipe are the ones CI runs and the docs show.

Fast and without Sphinx (the docs build itself, `sphinx-build -W -n`, checks the links between docs pages)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PREFIXES = ("tests/", "jupyter_torchdist/", "benchmarks/", "examples/", "labextension/", "docs/", ".ci/")
SKIPPED_DOCS = ("_build", "_examples")  # generated: the build's staged notebooks
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n\s*\n).)+?)(?<!`)\1(?!`)", re.S)  # within a paragraph
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def markdown_files() -> list[Path]:
    docs = [p for p in sorted((ROOT / "docs").rglob("*.md"))
            if not any(part in SKIPPED_DOCS for part in p.relative_to(ROOT / "docs").parts)]
    return [README, *docs]


def prose(path: Path) -> str:
    """The file's text with its fenced code blocks blanked out (line numbers kept)."""
    out, fence = [], None
    for line in path.read_text().splitlines():
        m = _FENCE.match(line)
        if m and (fence is None or m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence)):
            fence = m.group(1) if fence is None else None
            out.append("")
        else:
            out.append(line if fence is None else "")
    return "\n".join(out)


def repo_paths(text: str) -> list[tuple[int, str]]:
    """(line, path) for each word of an inline code span that names a repo path (`tests/unit/x.py`,
    `.venv/bin/python -m pytest tests/browser/x.py`); placeholders (`tests/...`) are not paths."""
    found = []
    for m in _CODE_SPAN.finditer(text):
        for word in m.group(2).split():
            word = word.strip("\"'(),;:")
            if word.startswith(PREFIXES) and "..." not in word:
                found.append((text.count("\n", 0, m.start()) + 1, re.sub(r"(::.*|:\d+)$", "", word)))
    return found


def exists(path: str) -> bool:
    return any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()


def test_every_path_the_readme_and_the_docs_name_in_backticks_exists():
    missing = [f"{md.relative_to(ROOT)}:{line}: {path}"
               for md in markdown_files() for line, path in repo_paths(prose(md)) if not exists(path)]
    assert not missing, "\n".join(missing)


def test_the_path_check_sees_what_it_should():
    paths = [p for _, p in repo_paths("see `tests/unit/test_layout.py` and\n`.venv/bin/python -m pytest\n"
                                      "tests/browser/x.py -k docs`\n\n`tests/...`, `spark.executorEnv.`, "
                                      "``jupyter_torchdist/a.py::f``, `open\n\nexamples/x.py`")]
    assert paths == ["tests/unit/test_layout.py", "tests/browser/x.py", "jupyter_torchdist/a.py"]
    assert exists("benchmarks/*.py") and not exists("benchmarks/no_such_*.py")


def test_every_relative_link_in_the_readme_resolves():
    text = prose(README)
    broken = []
    for m in _LINK.finditer(text):
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL, or an anchor in the README itself
        if not (README.parent / target.split("#")[0]).exists():
            broken.append(f"README.md:{text.count(chr(10), 0, m.start()) + 1}: {target}")
    assert not broken, "\n".join(broken)


def test_ci_runs_the_readme_test_command():
    command = ".venv/bin/python -m pytest tests -n 2"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert command in ci, "the test command .ci/run runs is the README's"
    assert f"```bash\n{command}\n```" in README.read_text()


def _python_block_after(text: str, heading: str) -> str:
    section = text[text.index(heading):]
    block = section[section.index("```python\n") + len("```python\n"):]
    return block[:block.index("```")]


def test_the_readme_cluster_recipe_is_the_docs_one():
    """tests/cluster/test_multihost.py runs the README's recipe; the clusters page shows the same."""
    clusters = (ROOT / "docs" / "user-guide" / "clusters.md").read_text()
    assert _python_block_after(README.read_text(), "### On a real cluster") == \
        _python_block_after(clusters, "## On a real cluster")


def test_the_gallery_holds_every_example_executed_with_its_cells_as_they_are():
    """examples/executed/ (written by .ci/gallery): each example, run, with its outputs (what they must show is each
    example's own test's); its code cells the example's own, so a changed example without a refreshed gallery fails
    here."""
    import json

    examples = ROOT / "examples"
    for path in sorted(examples.glob("*.ipynb")):
        if path.name.endswith(".out.ipynb"):
            continue
        executed = examples / "executed" / path.name
        assert executed.is_file(), f"{executed.relative_to(ROOT)} is missing: run .ci/gallery"
        mine, ran = json.loads(path.read_text()), json.loads(executed.read_text())
        sources = [[("".join(c["source"]) if isinstance(c["source"], list) else c["source"]) for c in nb["cells"]
                    if c["cell_type"] == "code"] for nb in (mine, ran)]
        assert sources[0] == sources[1], f"{executed.relative_to(ROOT)} is stale: run .ci/gallery"
        assert any(c.get("outputs") for c in ran["cells"]), f"{executed.name} has no outputs"


# Gallery notebooks with no training curve to show, and why.
NO_CURVE = {
    "07_debugging.ipynb": "failures, hangs and stacks: no run trains to its end",
}


def test_every_training_example_in_the_gallery_shows_its_curves_as_images():
    import json

    without = []
    for path in sorted((ROOT / "examples" / "executed").glob("*.ipynb")):
        outputs = [o for c in json.loads(path.read_text())["cells"] for o in c.get("outputs", [])]
        if path.name not in NO_CURVE and not any("image/png" in o.get("data", {}) for o in outputs):
            without.append(path.name)
    assert without == [], f"gallery notebooks without a plotted curve (matplotlib, committed as an output): {without}"
