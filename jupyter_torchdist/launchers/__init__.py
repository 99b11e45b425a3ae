"""Launcher backends, one per file, behind the small interface in ``base``; pyspark only in ``spark*``."""
from __future__ import annotations

from .base import Launcher

__all__ = ["Launcher", "get_launcher"]


def get_launcher(local: bool) -> Launcher:
    """The launcher for a run: Spark by default, plain local processes with ``--local``."""
    if local:
        from .local import LocalLauncher

        return LocalLauncher()
    from .spark import SparkLauncher

    return SparkLauncher()
