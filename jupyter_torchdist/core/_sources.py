"""Source text for tracebacks: cells and scripts run from memory, so ``linecache`` is told their lines.

Both sides call it: the kernel when it compiles a cell, each rank before it runs one, so a
traceback shows the user's own lines wherever it is formatted.
"""
from __future__ import annotations

import linecache

__all__ = ["register_source"]


def register_source(filename: str, source: str) -> None:
    """Make tracebacks able to show ``source``'s lines under ``filename``."""
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)
