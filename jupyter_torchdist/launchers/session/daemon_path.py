"""Spark's daemon's import path: the installed pyspark's own zips and jars off it (``_daemon`` says why)."""
from __future__ import annotations

import os

__all__ = ["installed_copies_off_path"]


def installed_copies_off_path(path: list[str], pyspark_loaded: bool) -> list[str]:
    """Drop from ``path`` (in place) the files (zips, jars) inside the installed pyspark package, the same code without
    a bytecode cache; what was dropped. Nothing once pyspark is imported (its modules came from where they came)."""
    installed = next((os.path.join(entry, "pyspark") for entry in path
                      if entry and os.path.isfile(os.path.join(entry, "pyspark", "__init__.py"))), None)
    if installed is None or pyspark_loaded:
        return []
    inside = os.path.realpath(installed) + os.sep
    dropped = [entry for entry in path if os.path.isfile(entry) and os.path.realpath(entry).startswith(inside)]
    path[:] = [entry for entry in path if entry not in dropped]
    return dropped
