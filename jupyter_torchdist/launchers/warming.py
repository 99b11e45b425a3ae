"""While the embedded Spark session starts, runs that need nothing of Spark run as local processes.

``%load_ext`` starts two things in the background: the local process server (a Python that imports torch, about 2
seconds) and then the embedded Spark session (a JVM, its services and Python workers: 10 seconds and more on a
laptop). Without a session of its own, a notebook's ranks run on this machine either way; a cell run before the
JVM is up (Run All, a student who types fast) need not wait for it. Such runs are local processes forked from that
server, as with ``--local``, and the view says so ("local processes (the embedded Spark session is still
starting)"); once the session is up, runs go to it as usual. Runs that must be Spark tasks
(``TorchDistributor(local_mode=False)``, ``horovod.spark.run``) wait for it.
"""
from __future__ import annotations

from .local import LocalLauncher

__all__ = ["WarmingLauncher", "LABEL"]

LABEL = "local processes (the embedded Spark session is still starting)"


class WarmingLauncher(LocalLauncher):
    """``LocalLauncher`` under its own name and label: chosen only while the embedded session starts."""

    name = "warming"
    label = LABEL
