"""``--max-restarts``: which failures start the run again, what each attempt was, and the one view across them.

A run is started again only for a failure from outside the user's code: a rank's process killed or crashed by a
signal (the OOM killer, a segfault in a library), its host, link or executor lost, or nothing but peers'
connection errors (the echoes of such a loss). An exception the cell raised would raise again: never retried.
Interrupts and ``--timeout`` end the cell. Each attempt runs on fresh ranks with the same payload; the cell's
``jt.restore`` loads the last commit (``rank.checkpoint``), and ``batches()`` resumes its epochs from it.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from ...core.errors import LaunchError, RankFailure, RunError, RunFailed
from ...core.options import RunOptions
from ...views import RunView

__all__ = ["restartable", "Attempt", "ContinuedView", "CheckpointFolder", "failed_attempt"]


def restartable(error: BaseException) -> RankFailure | None:
    """The root-cause failure of ``error`` if it came from outside the user's code, else None."""
    if not isinstance(error, RunFailed):
        return None
    root = error.root
    if root is None:
        return None
    if root.secondary:  # every failure is a peer's connection error: the cause is the network or a lost rank
        return root
    if root.kind == "lost" or (root.kind == "exit" and root.signal is not None):
        return root
    return None


@dataclass
class Attempt:
    """One attempt that failed and was started again."""

    number: int                 # 1 for the first
    failure: RankFailure        # its root cause
    failed_at: float
    started_at: float
    commit_step: int | None     # the last commit it made (what the next attempt resumes from), None if none
    commit_at: float | None
    restarted_at: float | None = None  # when the next attempt began

    @property
    def lost_s(self) -> float:
        """Training time lost: from the last commit (or the attempt's start) to the next attempt's start."""
        since = self.commit_at if self.commit_at is not None else self.started_at
        return max(0.0, (self.restarted_at or self.failed_at) - since)

    def line(self, of: int) -> str:
        resumed = f"step {self.commit_step}" if self.commit_step is not None else "the start (no commit yet)"
        return (f"attempt {self.number} of {of} failed: {self.failure.label()}: {self.failure.summary} - restarted "
                f"from {resumed}, {self.lost_s:.1f} s of training lost")


class ContinuedView:
    """One view across attempts: a failed attempt's last frame stays live until the next attempt draws over it;
    only the last attempt's end turns the view into the run report."""

    def __init__(self, inner: RunView) -> None:
        self.inner, self.log_tail = inner, inner.log_tail
        self._started = False
        self._last: dict[str, Any] | None = None
        self.latest: dict[str, Any] | None = None   # the last frame drawn (the runs panel reads it: panel/)

    def start(self, snapshot: dict[str, Any]) -> None:
        self.latest = snapshot
        if self._started:
            self.inner.update(snapshot)
        else:
            self._started = True
            self.inner.start(snapshot)

    @property
    def focus(self) -> frozenset[int]:
        return self.inner.focus

    def update(self, snapshot: dict[str, Any]) -> float | None:
        self.latest = snapshot
        return self.inner.update(snapshot)

    def finish(self, snapshot: dict[str, Any]) -> None:
        self._last = self.latest = snapshot
        self.inner.update(snapshot)

    @property
    def finished(self) -> bool:
        """A last frame was drawn (the report follows at ``close``)."""
        return self._last is not None

    def close(self) -> None:
        """The run is over (a value, or an error not retried): the report replaces the view."""
        if self._last is not None:
            self.inner.finish(self._last)


class CheckpointFolder:
    """Where a run's commits go: the user's ``--checkpoint-dir`` (kept), or a folder this kernel makes for ranks
    on its own machine (removed when the run ends). A run with restarts on a cluster must name one."""

    def __init__(self, where: str | None, made: bool) -> None:
        self.where, self.made = where, made

    @classmethod
    def for_run(cls, options: RunOptions, loopback: bool, kept: str | None = None) -> CheckpointFolder:
        """``kept``: a folder of this kernel's that outlives the run (a sweep member's beside its study, so the
        member run again resumes from it), used when the ranks share this machine."""
        if options.checkpoint_dir is not None:
            return cls(options.checkpoint_dir, made=False)
        if kept is not None and loopback:
            return cls(kept, made=False)
        if not (options.max_restarts and loopback):
            if options.max_restarts:
                raise LaunchError("--max-restarts on a cluster needs --checkpoint-dir: a folder every executor's "
                                  "host can reach (a shared or network file system, DBFS's /dbfs/...) or an object "
                                  "store URL (s3://, gs://, abfs://: fsspec and its backend installed on every host), "
                                  "so a restarted rank on another host finds the last commit")
            return cls(None, made=False)
        return cls(tempfile.mkdtemp(prefix="jupyter-torchdist-commits-"), made=True)

    def remove(self) -> None:
        if self.made and self.where is not None:
            shutil.rmtree(self.where, ignore_errors=True)

    def latest(self) -> int | None:
        """The step of the last complete commit, where this kernel can read the folder (None: none, or unknown).
        Read here, not taken from the ranks' COMMIT messages: a rank stopped at once may not have sent the last."""
        if self.where is None:
            return None
        from ...rank.checkpoint_store import Store  # the ranks' own reader of the folder, loaded only here

        try:
            steps = Store(self.where).steps()
        except Exception:
            return None
        return steps[-1] if steps else None


def failed_attempt(error: RunError, number: int, started_at: float, latest: int | None) -> Attempt | None:
    """The attempt ``error`` ended, if a restart can help (None: the error stands). ``latest``: the last commit's
    step as the checkpoint folder says (else the last COMMIT the kernel heard of)."""
    root = restartable(error)
    if root is None:
        return None
    state = error.result.state if error.result is not None else None
    committed = getattr(state, "committed", None)
    step = latest if latest is not None else committed[0] if committed else None
    at = committed[1] if committed and committed[0] == step else None
    return Attempt(number, root, root.at or time.time(), started_at, step, at)
