"""Read a torchrun-style script and its sibling modules in the kernel, so they travel with the run.

What runs on the rank is ``rank.script.Script``; this side only reads files.
"""
from __future__ import annotations

import os
from typing import Sequence

from ..rank.script import Script

__all__ = ["script_function", "collect_siblings"]

MAX_SIBLING_BYTES = 8 << 20   # past this, ship none: the folder is a project, not a script's helpers
MAX_SIBLING_FILES = 300
_SKIP_DIRS = {"__pycache__", "site-packages", "node_modules"}


def collect_siblings(folder: str) -> dict[str, str]:
    """Module name -> source for the .py modules and packages beside a script (bounded; {} if too big)."""
    found: dict[str, str] = {}
    total = 0

    def add(path: str, name: str) -> bool:
        nonlocal total
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError):
            return True  # unreadable here: it will not be importable there either
        total += len(text)
        found[name] = text
        return total <= MAX_SIBLING_BYTES and len(found) <= MAX_SIBLING_FILES

    def walk(directory: str, prefix: str) -> bool:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            return True
        for entry in entries:
            if entry.name.startswith(".") or entry.name in _SKIP_DIRS:
                continue
            if entry.is_file() and entry.name.endswith(".py"):
                stem = entry.name[:-3]
                key = prefix[:-1] + "/" if stem == "__init__" else prefix + stem  # "pkg/" marks a package
                if stem.isidentifier() and key != "/" and not add(entry.path, key):
                    return False
            elif entry.is_dir() and entry.name.isidentifier() and os.path.isfile(f"{entry.path}/__init__.py"):
                if not walk(entry.path, f"{prefix}{entry.name}."):
                    return False
        return True

    return found if walk(folder, "") else {}


def script_function(argv: Sequence[str]) -> Script:
    """Read ``argv[0]`` here (the kernel) and return a call that runs it, with ``argv[1:]``, on a rank."""
    if not argv:
        raise ValueError("no script given")
    path = os.path.abspath(argv[0])
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except OSError as exc:
        raise FileNotFoundError(f"cannot read the script {argv[0]!r}: {exc.strerror}") from None
    siblings = {k: v for k, v in collect_siblings(os.path.dirname(path)).items() if k != _stem(path)}
    return Script(path, source, tuple(str(a) for a in argv[1:]), siblings)


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]
