"""What the rank-side APIs reach while a rank runs: its plan, its number, its channel (send and receive).

Set once by ``rank.main`` when the rank has joined the run; ``None`` outside a run (plain Python, torchrun
without us), where APIs that need the kernel say so instead of failing obscurely.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..core.contract import RunPlan
    from .client import RankClient
    from .link import KernelLink
    from .resource_sampler import UsageSampler

__all__ = ["RankRuntime", "Commits", "current", "install"]


class Commits(Protocol):
    """What jt.commit / jt.restore and batches() use of a run's checkpoints (``checkpoint.Checkpoints``)."""

    restored: dict[str, Any] | None  # the data positions of the commit restored (batches() resumes there)

    def commit(self, step: int, objects: dict[str, Any]) -> None: ...
    def restore(self, objects: dict[str, Any]) -> int: ...
    def flush(self) -> None: ...


@dataclass
class RankRuntime:
    plan: RunPlan
    rank: int
    client: RankClient
    link: KernelLink
    bind_ip: str                  # the address this rank's own listeners use (one address, never every interface)
    usage: UsageSampler           # samples CPU, memory, GPU and input wait; main takes a last reading per cell
    cell: int = 1                 # the cell running now (kept ranks count them; per-cell numbers restart with it)
    data: object = None           # batches(): this rank's data plane (data.batches.RankData), made on first use;
    # typed there: the rank layer does not import the data layer above it
    checkpoints: Commits | None = None  # jt.commit / jt.restore, when the run has a checkpoint folder


_current: RankRuntime | None = None


def install(runtime: RankRuntime | None) -> None:
    global _current
    _current = runtime


def current() -> RankRuntime | None:
    return _current
