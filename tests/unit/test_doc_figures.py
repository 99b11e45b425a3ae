"""Every figure the docs and the README quote comes from a results file in benchmarks/results/: each paragraph, bullet
or table that quotes one names its benchmark (``benchmarks/bench_x.py``, a results file, a link to one, or an HTML
comment ``<!-- sources: bench_x ... -->``), and each figure is a number of those files, rounded as the page writes it.

On the Performance page, the index and the teaching-labs page every decimal of the prose is a figure; on every other
page (and the README) a decimal with a unit (``0.25 s``, ``68 KB/s``, ``1.02x``, ``92%``) is. Code blocks and inline
code are not prose (``lr=0.01`` is no claim)."""
from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from .test_docs_paths import markdown_files, prose

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
PAGES = [ROOT / "docs" / name for name in ("performance.md", "index.md", "user-guide/teaching-labs.md")]
DECIMAL = re.compile(r"(?<![\w.])(\d+\.\d+)(?![\d.]*\w)")
UNIT = r"\s?(?:s|ms|µs|us|min|h|MB|GB|KB|KB/s|MB/s|GB/s|x|×|%|steps/s|core|cores|calls/s|seconds|minutes)(?![\w/])"
MEASURED = re.compile(r"(?<![\w.])(\d+\.\d+)(?=(?:\s?[–-]\s?\d+(?:\.\d+)?)?" + UNIT + ")")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n\s*\n).)+?)(?<!`)\1(?!`)", re.S)


def chunks(text: str) -> list[str]:
    """Paragraphs, bullets and tables (a table with the paragraph just above it)."""
    parts = re.split(r"\n\s*\n|\n(?=- )", text)
    out: list[str] = []
    for part in parts:
        if part.lstrip().startswith("|") and out:
            out[-1] += "\n" + part
        else:
            out.append(part)
    return out


def sources(chunk: str) -> list[Path]:
    names = set(re.findall(r"\b(bench_[a-z_]+)(?:\.py|\.txt|\.json)", chunk))
    for listed in re.findall(r"<!-- sources: ([^>]*)-->", chunk):
        names |= set(listed.split())
    return [p for name in sorted(names) for p in (RESULTS / f"{name}.txt", RESULTS / f"{name}.json") if p.is_file()]


def numbers(paths: list[Path]) -> list[Decimal]:
    text = " ".join(p.read_text(errors="replace") for p in paths).replace(",", "")
    return [Decimal(x) for x in re.findall(r"\d+(?:\.\d+)?(?:e-?\d+)?", text)]


def rounds_to(x: Decimal, figure: str) -> bool:
    """Whether ``x`` (or ``x`` as a percentage) is ``figure`` at the figure's precision, half rounded up."""
    step = Decimal(1).scaleb(-len(figure.split(".")[1]))
    if abs(x.adjusted()) > 20:
        return False  # no figure: a commit's "557e830" read as a number
    return any((v).quantize(step, rounding=ROUND_HALF_UP) == Decimal(figure) for v in (x, x * 100))


def unsourced(page: Path, figure: re.Pattern[str] = DECIMAL) -> list[str]:
    out = []
    for chunk in chunks(prose(page)):
        figures = figure.findall(_CODE_SPAN.sub("", chunk))
        if not figures:
            continue
        paths = sources(chunk)
        if not paths:
            out.append(f"no results file named for: {chunk.strip()[:100]!r}")
            continue
        known = numbers(paths)
        for fig in figures:
            if not any(rounds_to(x, fig) for x in known):
                out.append(f"{fig} is in no number of {', '.join(p.name for p in paths)}: {chunk.strip()[:80]!r}")
    return out


def test_every_figure_on_the_performance_pages_is_in_its_results_file():
    assert [f"{page.name}: {line}" for page in PAGES for line in unsourced(page)] == []


def test_every_measured_figure_on_every_page_and_the_readme_is_in_its_results_file():
    others = [page for page in markdown_files() if page not in PAGES]
    assert [f"{page.relative_to(ROOT)}: {line}" for page in others for line in unsourced(page, MEASURED)] == []


def test_every_results_file_names_its_commit_date_and_machine():
    import json

    unnamed = []
    for path in sorted(RESULTS.glob("*.txt")):
        text = path.read_text()
        if not re.search(r"^# measured \d{4}-\d\d-\d\d \d\d:\d\d.* at commit [0-9a-f]{7,}", text, re.M) \
                or not re.search(r"^# machine: ", text, re.M):
            unnamed.append(path.name)
    for path in sorted(RESULTS.glob("*.json")):
        data = json.loads(path.read_text())
        named = re.match(r"[0-9a-f]{7,}", str(data.get("commit", ""))) and data.get("saved_at") and data.get("machine")
        if not named:
            unnamed.append(path.name)
    assert unnamed == [], f"results files that do not say when, at which commit and on which machine: {unnamed}"


def test_the_check_above_can_fail(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("The rerun takes 0.25 s (`benchmarks/bench_latency.py`).\n\nA claim of 12.34 s with no source.\n\n"
                    "It takes 9.99 s (`benchmarks/bench_latency.py`).\n\n```python\nlr = 0.01\n```\n\n"
                    "Python 3.11 and `--sweep \"lr=[0.1]\"` are no figures; 0.5 s is one.\n")
    found = unsourced(page)  # strictly: any decimal of the prose, a version too
    assert len(found) == 3 and "no results file" in found[0] and found[1].startswith("9.99"), found
    assert "3.11" in found[2]
    page.write_text(page.read_text().replace("0.5 s is one", "that is all"))
    measured = unsourced(page, MEASURED)  # elsewhere: decimals with a unit, outside code
    assert len(measured) == 2 and "12.34" in measured[0] and measured[1].startswith("9.99"), measured
