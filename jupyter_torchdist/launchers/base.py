"""What a launcher does: check it can place N ranks, start them, stop them."""
from __future__ import annotations

import abc
import queue
from dataclasses import dataclass

from ..channel import Inbound
from ..options import RunOptions
from ..rank_main import RunPlan

__all__ = ["Launcher", "LaunchInfo", "JOB_END"]

JOB_END = "job_end"  # backend message (rank -1) once the launcher's job has ended


@dataclass(frozen=True)
class LaunchInfo:
    label: str            # shown in the view, e.g. "spark local[4]"
    channel_host: str     # where the kernel listens so that ranks can reach it
    loopback: bool        # every rank runs on this host
    channel_tls: bool = False           # the live channel runs over TLS (tls.py)
    warnings: tuple[str, ...] = ()      # said once before the run starts (e.g. Spark encrypts, we do not)


class Launcher(abc.ABC):
    """Starts the ranks of one run. ``start`` returns at once; progress arrives on the inbox."""

    @abc.abstractmethod
    def prepare(self, options: RunOptions) -> LaunchInfo:
        """Check the run can be placed (slots, GPUs); raise LaunchError saying what to change."""

    @abc.abstractmethod
    def start(self, plan: RunPlan, inbox: "queue.SimpleQueue[Inbound]") -> None:
        """Launch every rank. When all have ended put Inbound(-1, "backend", {"t": JOB_END, ...})."""

    @abc.abstractmethod
    def cancel(self) -> None:
        """Hard stop of everything this run started (idempotent; returns at once)."""
