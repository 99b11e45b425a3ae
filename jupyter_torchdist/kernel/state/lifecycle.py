"""The run as the kernel records it, and the transitions of its status: pure, no I/O, no clock.

The status moves only through ``begin_cell``, ``begin_stop``, ``reject_value``, ``close_out``,
``conclude`` and ``abort``, each given the time by the caller (``state.RunState`` adds the folding of
messages, the snapshot draws it). Status: starting, running, stopping, then succeeded, failed, timeout or
interrupted.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from ...core.errors import RankFailure, RunError, RunFailed, RunInterrupted, RunTimeout, root_cause
from .rank import FINAL, RankState
from .stall import RunDebug
from .many_ranks import LossBand
from .resource_use import DataStats, data_over, input_notice

__all__ = ["RunLifecycle", "STOP_REASONS"]

STOP_REASONS: Final = ("failed", "timeout", "interrupted")


@dataclass
class RunLifecycle:
    world_size: int
    title: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    backend: str = ""
    status: str = "starting"  # starting, running, stopping, succeeded, failed, timeout, interrupted
    started_at: float = 0.0
    now: float = 0.0
    ended_at: float | None = None
    value_repr: str | None = None
    headline: str = ""
    ranks: list[RankState] = field(default_factory=list)
    failures: dict[int, RankFailure] = field(default_factory=dict)
    stop_reason: str | None = None
    job_ended_at: float | None = None
    job_error: str | None = None
    cell: int | None = None          # kept ranks: the cell this state is about (its messages carry it)
    notes: list[str] = field(default_factory=list)  # the kernel's own notices (kept ranks, slots)
    start_by: float | None = None    # ranks started one by one (dynamic allocation): all must say hello by then
    start_hint: str = ""             # ... and what to do when they do not
    data: DataStats = field(default_factory=DataStats)
    committed: tuple[int, float, int, float] | None = None  # the last jt.commit: (step, when, bytes, seconds)
    debug: RunDebug = field(default_factory=RunDebug)  # the stall rule, pdb's quit (stall.py)
    run_id: int | None = None        # the kernel's number for the run (jupyter_torchdist.runs())
    durable_id: str | None = None    # the run's durable id (run.id): unique across kernels, restarts and users
    background: bool = False         # the notebook went on while it ran (--background, a sweep's run)
    stopped_by: str | None = None    # who stopped it, when that was not the kernel's interrupt ("run.stop()")
    stopped_early: bool = False      # the only stop asked was a sweep's rule's: moot if every rank returned anyway
    band: LossBand = field(default_factory=LossBand)  # many-rank runs: the ranks' loss over the run (summary.py)
    folder: str | None = None        # --track tensorboard, --profile: the run's folder under --logdir

    def __post_init__(self) -> None:
        if not self.ranks:
            self.ranks = [RankState(r) for r in range(self.world_size)]

    def record(self, rs: RankState, failure: RankFailure | None) -> None:
        """``rs`` failed (when ``failure`` is not None): the rank says so, the run keeps its first failure."""
        if failure is not None:
            rs.fail(failure)
            self.failures.setdefault(rs.rank, failure)

    # -- transitions the kernel makes ---------------------------------------------------------------
    def begin_cell(self, cell: int, hosts: dict[int, tuple[str, int | None]], at: float,
                   heard: dict[int, float] | None = None) -> None:
        """Kept ranks: a later cell starts on ranks that are already up (no hello, no rendezvous); ``heard``:
        when each last said anything (their heartbeat goes on between cells), so a lost one is judged at once."""
        self.cell, self.status = cell, "running"
        for rs in self.ranks:
            rs.host, rs.pid = hosts.get(rs.rank, ("", None))
            rs.state, rs.started_at, rs.said_hello, rs.rank_connected = "running", at, True, True
            rs.last_word = (heard or {}).get(rs.rank)

    def begin_stop(self, reason: str, at: float) -> bool:
        """The run is being stopped (a failure, --timeout, an interrupt). False if it already was."""
        if reason not in STOP_REASONS:
            raise ValueError(f"unknown stop reason {reason!r}")
        if self.stop_reason is not None:
            return False
        self.stop_reason, self.status, self.now = reason, "stopping", at
        return True

    def reject_value(self, rank: int, summary: str, at: float) -> None:
        """A rank's value arrived but the kernel cannot use it (it would not unpickle here)."""
        rs = self.ranks[rank]
        rs.has_result = False  # the rank's result no longer stands
        if rank == 0:
            self.value_repr = None
        self.record(rs, RankFailure(rank, rs.where, "exception", summary, "", at, False))

    def close_out(self, at: float) -> None:
        """The run is over: mark what we never heard the end of, so the report says what we know."""
        for rs in self.ranks:
            if rs.pending_exit is not None and not rs.ended:
                self.record(rs, rs.pending_exit)
            rs.pending_exit = None
            if rs.settled:
                continue
            if self.stop_reason:
                rs.on_stopped(at)
            else:
                text = self.job_error or "the rank ended without reporting a result (its process or executor was lost)"
                self.record(rs, rs.on_lost(text.splitlines()[0][:500], self.job_error or "", at))

    def conclude(self, at: float, *, timeout: float | None, value_needed: bool) -> RunError | None:
        """Set the final status and headline; return the error to raise, or None when it succeeded."""
        self.ended_at = self.now = at
        data_over(self.data)
        error = self._outcome(timeout, value_needed)
        self.status = {RunTimeout: "timeout", RunInterrupted: "interrupted"}.get(type(error), "failed") \
            if error is not None else "succeeded"
        self.headline = error.headline if error is not None else ""
        return error

    def abort(self, at: float, why: str) -> None:
        """The kernel's own side broke (the launcher raised, an interrupt before the run began)."""
        self.ended_at = self.now = at
        self.status, self.headline = ("interrupted", "interrupted before the ranks started") \
            if why.startswith("KeyboardInterrupt") else ("failed", f"the run could not go on: {why}")

    def _outcome(self, timeout: float | None, value_needed: bool) -> RunError | None:
        verb = "interrupted" if self.cell is not None else "stopped"  # kept ranks are interrupted, not killed
        if self.stop_reason == "timeout":
            still = [r.rank for r in self.ranks if r.state == "stopped"]
            return RunTimeout(f"timed out after {timeout:g} s; ranks still running were {verb}: {still}",
                              self.failures, self.world_size)
        moot = self.stopped_early and all(r.state == "done" for r in self.ranks)  # every rank returned all the same
        if self.stop_reason == "interrupted" and not moot:
            how = f"stopped by {self.stopped_by}" if self.stopped_by else "interrupted"
            return RunInterrupted(f"{how}: every rank was {verb}", self.failures, self.world_size)
        if self.failures:
            return RunFailed(self._failure_headline(), self.failures, self.world_size)
        if value_needed and not self.ranks[0].has_result:
            failure = RankFailure(0, self.ranks[0].host, "lost", "rank 0 finished but its value never arrived")
            self.failures[0] = failure
            return RunFailed(f"{failure.label()} failed first: {failure.summary}", self.failures, self.world_size)
        return None

    def _failure_headline(self) -> str:
        root = root_cause(self.failures)
        if not root.secondary:
            return f"{root.label()} failed first: {root.summary}"
        # Every failure reads like an echo of a peer's: crowning one of them would mislead.
        never = [r.rank for r in self.ranks if r.state == "failed" and r.failure is not None
                 and "connect" in r.failure.summary.lower()]
        return (f"the ranks could not form or keep the process group ({len(self.failures)} of {self.world_size} "
                f"ranks failed, each with a peer's connection error, none with an error of its own)"
                + (f"; ranks that could not connect: {never[:16]}" if never else "")
                + f". First reported: {root.label()}: {root.summary}")

    def lose_silent(self, at: float, after_s: float) -> list[RankState]:
        """Ranks heard from and then silent for ``after_s`` seconds are lost, each named; returns them."""
        silent = [(rs, waited) for rs in self.ranks if (waited := rs.silent_for(at)) >= after_s]
        for rs, waited in silent:
            self.record(rs, rs.on_silence(waited, at))
        return [rs for rs, _ in silent]

    def lost_hosts(self, silent: list[RankState]) -> set[str]:
        """The addresses of the hosts the ``silent`` ranks ran on, unless no rank is heard at all (then the
        fault may as well be on the kernel's side: no host is given up)."""
        if len(silent) == len(self.ranks) or not any(rs.ip for rs in silent):
            return set()
        heard = {rs.ip for rs in self.ranks if rs not in silent and not rs.ended}
        return {rs.ip for rs in silent if rs.ip and not rs.ip.startswith("127.") and rs.ip not in heard}

    def fail_unstarted(self, at: float) -> None:
        """The start bound passed with ranks that never checked in: each is a launch failure, said once."""
        started = sum(r.said_hello for r in self.ranks)
        waited = at - self.started_at
        for rs in self.ranks:
            if not rs.said_hello and not rs.ended:
                self.record(rs, RankFailure(
                    rs.rank, rs.where, "launch", f"never started: no task slot came for its task within {waited:.0f} s "
                    f"({started} of {self.world_size} ranks started)", self.start_hint, at))
        self.start_by = None

    # -- questions -----------------------------------------------------------------------------------
    def start_overdue(self, at: float) -> bool:
        """Ranks that start one by one have not all checked in by the start bound."""
        return self.start_by is not None and at >= self.start_by and not self.hellos_complete()

    def _waiting_notice(self) -> str | None:
        if self.start_by is None or self.stop_reason is not None or self.hellos_complete():
            return None
        waited = self.now - self.started_at
        if waited < 2.0:
            return None
        started = sum(r.said_hello for r in self.ranks)
        return (f"waiting for executors: {started} of {self.world_size} ranks started, {waited:.0f} s of up to "
                f"{self.start_by - self.started_at:.0f} s")

    @property
    def settled(self) -> bool:
        return all(r.settled for r in self.ranks)

    def cell_ended(self) -> bool:
        """Kept ranks: every rank reported this cell's end, or is gone."""
        return all(r.state in FINAL for r in self.ranks)

    def hellos_complete(self) -> bool:
        return all(r.said_hello for r in self.ranks)

    def all_ended(self) -> bool:
        """Every rank ended (cheap while some run: it stops at the first of them)."""
        return not any(r.state not in FINAL for r in self.ranks)

    def took_every_step(self) -> bool:
        """Every rank has ended, or reported its last step (a ``step`` at its ``total``): it only has to return."""
        return all(r.state in FINAL or (r.total is not None and r.step is not None and r.step >= r.total)
                   for r in self.ranks)

    def running_ranks(self) -> list[int]:
        return [r.rank for r in self.ranks if r.state not in FINAL]

    def notices(self) -> list[str]:
        """What the user should know that is not a failure."""
        bound = input_notice([r.usage for r in self.ranks], self.data.workers)
        dropped = [f"rank {r.rank}: {r.log_dropped:,} log lines past the budget were dropped"
                   for r in self.ranks if r.log_dropped]
        waiting = self._waiting_notice()
        return ([waiting] if waiting else []) + self.notes + self._commit_notice() + ([bound] if bound else []) \
            + dropped

    def _commit_notice(self) -> list[str]:
        if self.committed is None:
            return []
        step, _, size, seconds = self.committed
        return [f"last commit: step {step} ({size / 1e6:.1f} MB, {seconds * 1000:.0f} ms to save)"]
