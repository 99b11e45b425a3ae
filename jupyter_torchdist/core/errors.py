"""Every error the package raises, in one hierarchy; failures keyed by rank, the earliest real one first.

``DistributeError``
 ├─ ``OptionsError``   the options are wrong (the magic shows it as a usage error)
 ├─ ``LaunchError``    refused before anything launched: what to change is in the message
 │   └─ ``CaptureError``   the cell uses something that cannot travel to the ranks
 └─ ``RunError``       the run started and did not succeed; ``.result`` has its state and logs
     ├─ ``RunFailed``      at least one rank failed (the root cause first)
     ├─ ``RunTimeout``     ``--timeout`` passed
     ├─ ``RunInterrupted`` the user stopped it
     │   └─ ``MemberStoppedEarly``   a sweep's early-stopping rule stopped this member (``MemberPruned``: its
     │                              name before, kept as an alias)
     └─ ``MemberFailed``   a sweep ended this member for a reason of its own

``LaunchError`` and ``RunError`` are also ``RuntimeError``s: pyspark's TorchDistributor raises RuntimeError for the
same refusals and failures, so ``except RuntimeError`` written for it catches ours. ``OptionsError`` is a
``ValueError`` instead (bad arguments, as pyspark's ValueError for them), not a RuntimeError.

IPython draws them through ``_render_traceback_``, without our frames.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final, Protocol

from .brief import group_texts

__all__ = [
    "RankFailure", "DistributeError", "OptionsError", "LaunchError", "CaptureError", "RunError",
    "RunFailed", "RunTimeout", "RunInterrupted", "MemberStoppedEarly", "MemberPruned", "MemberFailed", "is_secondary",
    "root_cause",
]

# Errors a rank raises because a *peer* died: never the root cause when a real one exists.
_SECONDARY = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|ProcessGroupGloo|gloo/transport"
    r"|NCCL communicator was aborted|ncclRemoteError|DistNetworkError|Socket Timeout|recvBytes|sendBytes"
    r"|stopped by the kernel|timed out connecting|connectFullMesh|SO_ERROR",
    re.IGNORECASE,
)


ONE_BY_ONE: Final = 16  # other ranks' failures listed one by one; past this many they are grouped by what they say


def is_secondary(summary: str, traceback_text: str = "") -> bool:
    """Whether a rank's error reads like an echo of a peer's failure rather than its own."""
    return bool(_SECONDARY.search(summary) or _SECONDARY.search(traceback_text[-2000:]))


class RunOutcome(Protocol):
    """What a run left behind (``kernel.result.RunResult``), as the errors carry it: declared here so that
    this module, which every layer imports, imports none of them."""

    value: Any
    values: dict[int, Any]
    state: Any
    logs: dict[int, list[tuple[str, str]]]

    def report(self) -> Any: ...


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
    signal: str | None = None  # kind "exit": the signal that ended the process (None: it exited with a code)

    def label(self) -> str:
        if not self.host and self.kind == "launch":
            return f"rank {self.rank}"  # never started: it has no host
        return f"rank {self.rank} on {self.host or 'unknown host'}"


def root_cause(failures: dict[int, RankFailure]) -> RankFailure:
    """The earliest primary failure, or the earliest of all if every one is secondary."""
    return sorted(failures.values(), key=lambda f: (f.secondary, f.at, f.rank))[0]


class DistributeError(Exception):
    """Base of our errors. IPython shows ``_render_traceback_`` instead of our frames."""

    result: RunOutcome | None = None  # the run's state and logs, when a run had started

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31m{type(self).__name__}\x1b[0m: {self}"]


class OptionsError(DistributeError, ValueError):
    """Bad options; the message names the option and what to write instead."""


class LaunchError(DistributeError, RuntimeError):
    """Refused before anything launched; the message says what to change."""


class CaptureError(LaunchError):
    """The cell uses something that cannot be sent to the ranks; the message names it."""


class RunError(DistributeError, RuntimeError):
    """The run started and did not succeed.

    ``failures`` holds each failed rank's reason (it may be empty for a timeout or an interrupt
    that stopped healthy ranks); ``headline`` is the one line the view and the report show.
    """

    def __init__(self, headline: str, failures: dict[int, RankFailure] | None = None, world_size: int = 0,
                 *, result: RunOutcome | None = None, extra: list[str] | None = None) -> None:
        self.headline = headline
        self.failures = dict(failures or {})
        self.world_size = world_size
        self.result = result
        self.extra = list(extra or [])
        super().__init__(headline)

    @property
    def root(self) -> RankFailure | None:
        return root_cause(self.failures) if self.failures else None

    @property
    def rank(self) -> int | None:
        root = self.root
        return None if root is None else root.rank

    def __str__(self) -> str:
        return self.headline

    def _render_traceback_(self) -> list[str]:
        lines = [f"\x1b[31m{type(self).__name__}\x1b[0m: {self}"]
        root = self.root
        if root is not None:
            lines += ["", f"\x1b[1m--- {root.label()} (root cause) ---\x1b[0m"]
            lines += (root.traceback or root.summary).rstrip("\n").splitlines()
            others = [f for f in sorted(self.failures.values(), key=lambda f: f.rank) if f.rank != root.rank]
            if others:
                lines += ["", "Other ranks (secondary):"]
                lines += [f"  {f.label()}: {f.summary}" for f in others] if len(others) <= ONE_BY_ONE else \
                    _grouped(others)
        return lines + self.extra


def _grouped(others: list[RankFailure]) -> list[str]:
    """Many ranks' failures as lines of ranks that say the same thing, counted (a thousand echoes are one line)."""
    groups = group_texts((f.rank, f.summary) for f in others)
    lines = [f"  {g['ranks']:,} ranks ({', '.join(map(str, g['sample']))}, ...): {g['summary']}" if g["ranks"] > 1
             else f"  rank {g['sample'][0]}: {g['summary']}" for g in groups]
    left = len(others) - sum(g["ranks"] for g in groups)
    return lines + ([f"  ... and {left:,} more ranks saying other things"] if left else [])


class RunFailed(RunError):
    """At least one rank failed; the root cause is the earliest real failure."""

    def __init__(self, headline: str, failures: dict[int, RankFailure] | None = None, world_size: int = 0,
                 *, result: RunOutcome | None = None, extra: list[str] | None = None) -> None:
        if not failures:
            raise ValueError("RunFailed needs at least one rank's failure; use RunError for a run that "
                             "ended without one")
        super().__init__(headline, failures, world_size, result=result, extra=extra)


class RunTimeout(RunError):
    """--timeout passed; the ranks still running were stopped."""


class RunInterrupted(RunError):
    """The user interrupted the kernel; every rank was stopped."""


class MemberStoppedEarly(RunInterrupted):
    """A sweep's early-stopping rule (``--early-stop``) stopped this member (its every rank): its metric was worse
    than its peers' at a rung. Not a failure: its curve and last values stay in the sweep's results; its state is
    ``state`` (``"stopped_early"``)."""

    state: Final = "stopped_early"


MemberPruned = MemberStoppedEarly   # its name before the early-stopping rules had one word (deprecated)


class MemberFailed(RunError):
    """The sweep ended this member for a reason of its own (an early-stopping rule that never got its metric)."""
