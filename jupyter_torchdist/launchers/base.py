"""What a launcher does: check it can place N ranks, start them, stop them. One backend per file."""
from __future__ import annotations

import abc
import queue

from ..contract import Inbound, LaunchInfo, RunPlan
from ..options import RunOptions

__all__ = ["Launcher"]


class Launcher(abc.ABC):
    """Starts the ranks of one run. ``start`` returns at once; progress arrives on the inbox."""

    @abc.abstractmethod
    def prepare(self, options: RunOptions) -> LaunchInfo:
        """Check the run can be placed (slots, GPUs); raise LaunchError saying what to change."""

    @abc.abstractmethod
    def start(self, plan: RunPlan, inbox: queue.SimpleQueue[Inbound]) -> None:
        """Launch every rank. When all have ended put ``Inbound(-1, BACKEND, {"t": JOB_END, ...})``."""

    @abc.abstractmethod
    def cancel(self) -> None:
        """Hard stop of everything this run started (idempotent; returns at once)."""
