"""What the rank-side APIs reach while a rank runs: its plan, its number, its channel (send and receive).

Set once by ``rank.main`` when the rank has joined the run; ``None`` outside a run (plain Python, torchrun
without us), where APIs that need the kernel say so instead of failing obscurely.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..contract import RunPlan
    from .client import RankClient
    from .link import KernelLink

__all__ = ["RankRuntime", "current", "install"]


@dataclass
class RankRuntime:
    plan: RunPlan
    rank: int
    client: RankClient
    link: KernelLink
    bind_ip: str           # the address this rank's own listeners use (one address, never every interface)
    extras: dict[str, Any]  # per-rank state other modules hang here (the data receiver, this cell's numbers)


_current: RankRuntime | None = None


def install(runtime: RankRuntime | None) -> None:
    global _current
    _current = runtime


def current() -> RankRuntime | None:
    return _current
