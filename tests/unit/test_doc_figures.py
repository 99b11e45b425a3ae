"""Every figure on the Performance page comes from a results file in benchmarks/results/: each paragraph, bullet or
table names its benchmark (``benchmarks/bench_x.py``, a results file, or an HTML comment ``<!-- sources: bench_x
... -->``), and each of its decimal figures is a number of those files, rounded as the page writes it."""
from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
PAGES = [ROOT / "docs" / name for name in ("performance.md", "index.md", "user-guide/teaching-labs.md")]
DECIMAL = re.compile(r"(?<![\w.])(\d+\.\d+)(?![\d.]*\w)")


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
    return any((v).quantize(step, rounding=ROUND_HALF_UP) == Decimal(figure) for v in (x, x * 100))


def unsourced(page: Path) -> list[str]:
    out = []
    for chunk in chunks(page.read_text()):
        figures = DECIMAL.findall(chunk)
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


def test_the_check_above_can_fail(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("The rerun takes 0.25 s (`benchmarks/bench_latency.py`).\n\nA claim of 12.34 s with no source.\n\n"
                    "It takes 9.99 s (`benchmarks/bench_latency.py`).\n")
    found = unsourced(page)
    assert len(found) == 2 and "no results file" in found[0] and found[1].startswith("9.99")
