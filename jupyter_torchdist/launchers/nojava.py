"""No Java on this machine: runs that would use the embedded Spark session run as local processes, every time.

Spark needs a Java runtime; a laptop or a hosted notebook often has none. Rather than a first cell that works (on
local processes, while a JVM that cannot start is "starting") and a later one that fails, every run without a
session of the notebook's own goes to local processes, as with ``--local``, and the first one says once why and
what installing Java adds. Runs that must be Spark tasks (``TorchDistributor(local_mode=False)``) still say that
Spark needs Java.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Final

from ..core.contract import LaunchInfo
from ..core.options import RunOptions
from .local import LocalLauncher

__all__ = ["NoJavaLauncher", "LABEL", "NOTICE"]

LABEL: Final = "local processes (no Java here for Spark)"
NOTICE: Final = ("no Java found (no java on PATH, JAVA_HOME not set): runs use local processes on this machine, as "
                 "with --local. Installing Java 17 or newer adds Spark tasks (clusters, "
                 "TorchDistributor(local_mode=False)) and Spark DataFrames through jupyter_torchdist.batches().")


class _Said:
    notice = False  # the notice goes with the first such run only


class NoJavaLauncher(LocalLauncher):
    """``LocalLauncher`` under its own name and label: chosen only when no Java can start Spark here."""

    name = "no-java"
    label = LABEL

    def prepare(self, options: RunOptions) -> LaunchInfo:
        info = super().prepare(options)
        if _Said.notice:
            return info
        _Said.notice = True
        return replace(info, warnings=(*info.warnings, NOTICE))
