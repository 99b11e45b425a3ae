"""Failures keyed by rank, the earliest real one first; rendered for IPython without our frames."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "RankFailure", "DistributeError", "LaunchError", "RunFailed", "RunTimeout", "RunInterrupted",
    "is_secondary",
]

# Errors a rank raises because a *peer* died: never the root cause when a real one exists.
_SECONDARY = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|ProcessGroupGloo|gloo/transport"
    r"|NCCL communicator was aborted|ncclRemoteError|DistNetworkError|Socket Timeout|recvBytes|sendBytes"
    r"|stopped by the kernel",
    re.IGNORECASE,
)


def is_secondary(summary: str, traceback_text: str = "") -> bool:
    return bool(_SECONDARY.search(summary) or _SECONDARY.search(traceback_text[-2000:]))


@dataclass(frozen=True)
class RankFailure:
    """Why one rank failed. ``at`` is the rank's own clock when it failed."""
    rank: int
    host: str
    kind: str  # "exception" | "exit" | "lost" | "launch"
    summary: str
    traceback: str = ""
    at: float = 0.0
    secondary: bool = False

    def label(self) -> str:
        return f"rank {self.rank} on {self.host or 'unknown host'}"


class DistributeError(Exception):
    """Base of our errors. IPython shows ``_render_traceback_`` instead of our frames."""

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31m{type(self).__name__}\x1b[0m: {self}"]


class LaunchError(DistributeError):
    """Refused before anything launched; the message says what to change."""


def root_cause(failures: dict[int, RankFailure]) -> RankFailure:
    """The earliest primary failure, or the earliest of all if every one is secondary."""
    ordered = sorted(failures.values(), key=lambda f: (f.secondary, f.at, f.rank))
    return ordered[0]


@dataclass(eq=False)
class RunFailed(DistributeError):
    failures: dict[int, RankFailure]
    world_size: int
    headline: str = "failed"
    extra: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(str(self))

    @property
    def root(self) -> RankFailure:
        return root_cause(self.failures)

    @property
    def rank(self) -> int:
        return self.root.rank

    def __str__(self) -> str:
        if not self.failures:
            return f"distributed run {self.headline}"
        r = self.root
        return f"{r.label()} {self.headline} first: {r.summary}"

    def _render_traceback_(self) -> list[str]:
        lines = [f"\x1b[31m{type(self).__name__}\x1b[0m: {self}"]
        if self.failures:
            r = self.root
            lines.append("")
            lines.append(f"\x1b[1m--- {r.label()} (root cause) ---\x1b[0m")
            lines.extend((r.traceback or r.summary).rstrip("\n").splitlines())
            others = [f for f in sorted(self.failures.values(), key=lambda f: f.rank) if f.rank != r.rank]
            if others:
                lines.append("")
                lines.append("Other ranks (secondary):")
                lines.extend(f"  {f.label()}: {f.summary}" for f in others)
        lines.extend(self.extra)
        return lines


class RunTimeout(RunFailed):
    """--timeout passed; the ranks still running were stopped."""


class RunInterrupted(RunFailed):
    """The user interrupted the kernel; every rank was stopped."""
