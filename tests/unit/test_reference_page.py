"""docs/reference.md holds everything a user can type or set, and stays complete: every option of the one parser,
every magic, every configurable setting of DistributeMagics, every environment variable and every Spark key the
package names in its source. A new one without a line on the page fails here."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference.md"
PACKAGE = ROOT / "jupyter_torchdist"


def _on_page() -> set[str]:
    """Every inline code span of the page, and every word of each (`-n N`, `--nprocs N`)."""
    spans = re.findall(r"`([^`\n]+)`", PAGE.read_text())
    return set(spans) | {word.strip(",") for span in spans for word in re.split(r"[\s=]+", span)}


def _source() -> str:
    return "\n".join(p.read_text() for p in sorted(PACKAGE.rglob("*.py")))


def test_every_option_of_the_magic_and_the_command_line_is_on_the_page():
    from jupyter_torchdist.core.options import _PARSERS

    flags = {flag for parser in _PARSERS.values() for action in parser._actions for flag in action.option_strings}
    assert flags, "the parser has options"
    assert sorted(flags - _on_page()) == []


def test_every_magic_and_every_setting_is_on_the_page():
    from jupyter_torchdist.kernel.magics.distribute import DistributeMagics

    magics = {f"%{name}" for name in DistributeMagics.magics["line"]} | \
        {f"%%{name}" for name in DistributeMagics.magics["cell"]}
    settings = {f"DistributeMagics.{name}" for name in DistributeMagics.class_trait_names(config=True)}
    text = PAGE.read_text()
    assert [m for m in sorted(magics) if not re.search(re.escape(m) + r"(?![\w])", text)] == []
    assert sorted(settings - _on_page()) == []


def test_every_environment_variable_and_spark_key_the_package_names_is_on_the_page():
    source = _source()
    ours = set(re.findall(r"\bJUPYTER_TORCHDIST_[A-Z_]+[A-Z]\b", source))
    read = set(re.findall(r"environ(?:\.get)?[\[(]\s*[\"']([A-Z][A-Z0-9_]+)[\"']", source))
    read |= set(re.findall(r"getenv\(\s*[\"']([A-Z][A-Z0-9_]+)[\"']", source))
    keys = set(re.findall(r"[\"']((?:spark|pytorch)\.[A-Za-z0-9_.]+[A-Za-z0-9])[\"']", source))
    assert ours and keys
    missing = sorted((ours | read | keys) - _on_page())
    assert missing == [], f"not on docs/reference.md: {missing}"
