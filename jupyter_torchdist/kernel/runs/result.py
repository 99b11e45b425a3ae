"""What a run leaves behind: the value, every rank's value, the state and every rank's log."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..state.run import RunState

__all__ = ["RunResult"]


@dataclass
class RunResult:
    """A finished run, succeeded or not (a failed run's is on the error: ``exc.result``)."""

    value: Any                      # rank 0's value, or the list of every rank's with all_ranks
    values: dict[int, Any]          # every value that came back, by rank
    state: RunState                 # the run as the view last drew it
    logs: dict[int, list[tuple[str, str]]] = field(default_factory=dict)  # (stream, line) per rank, all kept
    attempts: list[Any] = field(default_factory=list)  # --max-restarts: the attempts that failed and were restarted

    def loss_curve(self, rank: int = 0) -> list[tuple[float, float]]:
        """The ``(step, loss)`` points rank ``rank`` reported with ``report(step=..., loss=...)``, as the live view drew
        its curve: every point up to 400, the whole curve at half the resolution each time it passes that. Empty when
        the rank reported no loss. For a plot of the run after it ended: ``plt.plot(*zip(*result.loss_curve()))``."""
        ranks = self.state.ranks
        return list(ranks[rank].history) if 0 <= rank < len(ranks) else []

    def report(self) -> Any:
        """The run report (displays itself in a notebook; ``repr`` is the text version)."""
        from ...views.report import RunReport

        return RunReport(self.state.snapshot())
