"""The saved run report: one snapshot as a MIME bundle every front end can draw.

``report_bundle`` gives three views of a snapshot, all from one trimmed copy:

* ``application/vnd.jupyter-torchdist.run+json``: the snapshot itself, drawn by the JupyterLab
  extension (``labextension/``) with or without a kernel;
* ``text/html``: a self-contained fallback for GitHub, nbviewer and anything without the extension;
* ``text/plain``: a table for terminals and ``nbconvert --to script/markdown``.

Pure Python: no IPython import, so it is cheap to import and test.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from .report_html import html_of
from .report_text import report_text, text_of
from .trim import REPORT, Budget, trim_snapshot

__all__ = ["MIME_TYPE", "RunReport", "report_bundle"]

MIME_TYPE: Final = "application/vnd.jupyter-torchdist.run+json"


def report_bundle(snapshot: Mapping[str, Any], budget: Budget = REPORT) -> dict[str, object]:
    """``{MIME_TYPE: trimmed snapshot, "text/html": ..., "text/plain": ...}`` for ``display``."""
    trimmed = trim_snapshot(snapshot, budget)
    return {MIME_TYPE: trimmed, "text/html": html_of(trimmed), "text/plain": text_of(trimmed)}


class RunReport:
    """A run snapshot that displays itself: ``IPython.display.display(RunReport(snap))``."""

    def __init__(self, snapshot: Mapping[str, Any], budget: Budget = REPORT) -> None:
        self.snapshot: dict[str, Any] = dict(snapshot)
        self.budget = budget

    def _repr_mimebundle_(self, include: Iterable[str] | None = None,
                          exclude: Iterable[str] | None = None) -> dict[str, object]:
        bundle = report_bundle(self.snapshot, self.budget)
        if include:
            wanted = set(include)
            bundle = {k: v for k, v in bundle.items() if k in wanted}
        if exclude:
            unwanted = set(exclude)
            bundle = {k: v for k, v in bundle.items() if k not in unwanted}
        return bundle

    def __repr__(self) -> str:
        return report_text(self.snapshot)
