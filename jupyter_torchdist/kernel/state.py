"""What we know about a run, built from messages and transitions only: no I/O, no threads, no clock.

``RunState.apply`` folds one inbound message into the state through an explicit table (``HANDLERS``:
every ``(role, type)`` of ``contract.INBOUND`` has an entry, and a test keeps it so). The run's status
moves only through ``begin_stop``, ``reject_value``, ``close_out`` and ``conclude``, each given the
time by the caller. ``snapshot`` turns the state into the one schema every view draws.
"""
from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Final

from .. import contract as C
from ..errors import RankFailure, RunError, RunFailed, RunInterrupted, RunTimeout, is_secondary, root_cause
from ..views.schema import LOSS_KEYS, RunSnapshot
from .usage import DataStats, RankUsage, data_over, fold_data_status, fold_usage, input_notice

__all__ = ["RankState", "RunState", "HANDLERS", "LOG_TAIL", "HISTORY_POINTS"]

LOG_TAIL: Final = 200          # lines per rank in a snapshot
LOG_KEEP: Final = 20_000       # lines per rank kept in the kernel
HISTORY_POINTS: Final = 400    # loss-curve points kept per rank
FINAL: Final = ("done", "failed", "stopped")
STOP_REASONS: Final = ("failed", "timeout", "interrupted")


@dataclass
class RankState:
    rank: int
    host: str = ""
    ip: str = ""
    pid: int | None = None
    store_port: int | None = None               # rank 0: where its TCPStore listens
    state: str = "pending"  # pending, starting, running, done, failed, stopped
    step: int | None = None
    total: int | None = None
    rate: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    last_line: str = ""
    logs: collections.deque[tuple[str, str]] = field(default_factory=lambda: collections.deque(maxlen=LOG_KEEP))
    log_lines: int = 0
    log_dropped: int = 0                        # lines the rank could not send (past its budget)
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    exit_signal: str | None = None
    failure: RankFailure | None = None
    said_hello: bool = False
    has_result: bool = False
    agent_exited: bool = False
    rank_connected: bool = False                # the rank's own connection is open: its messages may be in flight
    pending_exit: RankFailure | None = None     # the agent saw the rank die; judged once that connection drains
    history: list[tuple[float, float]] = field(default_factory=list)
    rate_mark: tuple[float, int] | None = None
    usage: RankUsage = field(default_factory=RankUsage)

    @property
    def settled(self) -> bool:
        """Ended, and nothing more will come about it."""
        return self.state in FINAL and (self.agent_exited or self.state == "stopped")


def _number(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else str(value)
    return str(value)[:80]


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass
class RunState:
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
    data: DataStats = field(default_factory=DataStats)

    def __post_init__(self) -> None:
        if not self.ranks:
            self.ranks = [RankState(r) for r in range(self.world_size)]

    # -- folding messages ------------------------------------------------------------------------
    def apply(self, rank: int, role: str, msg: C.InboundMessage, at: float) -> None:
        """Fold one message in; ``rank`` is -1 for the launcher's run-wide messages."""
        handler = HANDLERS.get((role, str(msg.get("t"))))
        if handler is not None and (rank >= 0 or role == C.BACKEND):
            handler(self, self.ranks[rank] if rank >= 0 else None, msg, at)

    def _hello(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        rs.host, rs.ip = str(msg.get("host") or rs.host), str(msg.get("ip") or "")
        rs.pid, rs.store_port, rs.said_hello = msg.get("pid"), msg.get("store_port"), True
        if rs.state == "pending":
            rs.state, rs.started_at = "starting", at

    def _agent_hello(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        rs.host = rs.host or str(msg.get("host") or "")
        if rs.state == "pending":
            rs.state, rs.started_at = "starting", at

    def _state(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        if rs.state not in FINAL and msg.get("state") in ("starting", "running"):
            rs.state = msg["state"]
            if self.status == "starting" and rs.state == "running":
                self.status = "running"

    def _progress(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        when = float(msg.get("at") or at)
        step, total = _int_or_none(msg.get("step")), _int_or_none(msg.get("total"))
        if step is not None:
            self._update_rate(rs, when, step)
            rs.step = step
        if total is not None:
            rs.total = total
        metrics = msg.get("metrics") or {}
        if isinstance(metrics, dict):
            for key, value in metrics.items():
                rs.metrics[str(key)[:40]] = _number(value)
            self._record_loss(rs, metrics)

    @staticmethod
    def _update_rate(rs: RankState, when: float, step: int) -> None:
        mark = rs.rate_mark
        if mark is None or step < mark[1]:
            rs.rate_mark = (when, step)
            return
        dt = when - mark[0]
        if dt >= 0.5:
            inst = (step - mark[1]) / dt
            rs.rate = inst if rs.rate is None else 0.5 * rs.rate + 0.5 * inst
            rs.rate_mark = (when, step)

    @staticmethod
    def _record_loss(rs: RankState, metrics: dict[str, Any]) -> None:
        for key in LOSS_KEYS:
            value = metrics.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                x = float(rs.step if rs.step is not None else len(rs.history))
                rs.history.append((x, float(value)))
                if len(rs.history) > HISTORY_POINTS:
                    rs.history = rs.history[::2]  # keep the whole curve, at half the resolution
                return

    def _log(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        text = str(msg.get("text", ""))
        rs.logs.append(("stderr" if msg.get("stream") == "stderr" else "stdout", text))
        rs.log_lines += 1
        if text.strip():
            rs.last_line = text.strip()[:300]

    def _dropped(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        lines = _int_or_none(msg.get("log_lines"))
        if lines is not None:
            rs.log_dropped = max(rs.log_dropped, lines)  # counts are cumulative: late or repeated notices are fine

    def _usage(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        fold_usage(rs.usage, msg, at)

    def _data_request(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        """batches() opening or closing an epoch: the data service answers it; the rank's usage shows its wait."""

    def _data_status(self, rs: RankState | None, msg: dict[str, Any], at: float) -> None:
        fold_data_status(self.data, msg)

    def _other_cell(self, msg: dict[str, Any]) -> bool:
        """A kept rank's late word about an earlier cell: not about this one."""
        return self.cell is not None and msg.get("cell") != self.cell

    def _result(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        if rs.state in FINAL or self._other_cell(msg):
            return
        rs.has_result = True
        rs.state, rs.ended_at = "done", float(msg.get("at") or at)
        if rs.rank == 0 and msg.get("repr") is not None:
            self.value_repr = str(msg["repr"])

    def _failed(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        if self._other_cell(msg):
            return
        if msg.get("interrupted") and self.stop_reason is not None and rs.state not in FINAL:
            rs.state, rs.ended_at = "stopped", float(msg.get("at") or at)  # we asked for it: not a failure
            return
        summary, tb = str(msg.get("summary", "failed")), str(msg.get("traceback", ""))
        self._fail(rs, RankFailure(rs.rank, rs.host, "exception", summary, tb, float(msg.get("at") or at),
                                   is_secondary(summary, tb)))

    def _exit(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        rs.agent_exited = True
        rs.exit_code, rs.exit_signal = msg.get("code"), msg.get("signal")
        if rs.state in FINAL:
            return
        if msg.get("stopped"):
            rs.state, rs.ended_at = "stopped", at
            return
        how = f"killed by {rs.exit_signal}" if rs.exit_signal else f"exited with code {rs.exit_code}"
        hint = " (out of memory? the kernel's OOM killer sends SIGKILL)" if rs.exit_signal == "SIGKILL" else ""
        failure = RankFailure(rs.rank, rs.host, "exit", f"the rank's process {how}{hint} before finishing the cell",
                              "", float(msg.get("at") or at), False)
        if rs.rank_connected:
            # The agent's socket and the rank's are read by different threads: the rank's result or
            # traceback may still be on its way. Judge when its connection has drained.
            rs.pending_exit = failure
            return
        self._fail(rs, failure)

    def _connected(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        rs.rank_connected = True

    def _disconnected(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        rs.rank_connected = False
        if rs.pending_exit is not None and rs.state not in FINAL:
            self._fail(rs, rs.pending_exit)
        rs.pending_exit = None

    def _agent_link(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        """The agent's own connection opening or closing: its EXIT (or the channel's LOST) says the rest."""

    def _lost(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        """The launcher lost this rank (executor gone, job failed before it reported)."""
        rs.agent_exited = True
        if rs.state in FINAL:
            return
        summary = str(msg.get("summary", "lost"))
        self._fail(rs, RankFailure(rs.rank, rs.host, "lost", summary, str(msg.get("traceback", "")), at,
                                   is_secondary(summary)))

    def _stopped(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        rs.agent_exited = True
        if rs.state not in FINAL:
            rs.state, rs.ended_at = "stopped", at

    def _job_end(self, rs: RankState | None, msg: dict[str, Any], at: float) -> None:
        self.job_ended_at, self.job_error = at, msg.get("error")

    def _fail(self, rs: RankState, failure: RankFailure) -> None:
        rs.state, rs.ended_at, rs.failure = "failed", failure.at, failure
        self.failures.setdefault(rs.rank, failure)

    # -- transitions the kernel makes ---------------------------------------------------------------
    def begin_cell(self, cell: int, hosts: dict[int, tuple[str, int | None]], at: float) -> None:
        """Kept ranks: a later cell starts on ranks that are already up (no hello, no rendezvous)."""
        self.cell, self.status = cell, "running"
        for rs in self.ranks:
            rs.host, rs.pid = hosts.get(rs.rank, ("", None))
            rs.state, rs.started_at, rs.said_hello, rs.rank_connected = "running", at, True, True

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
        self._fail(rs, RankFailure(rank, rs.host, "exception", summary, "", at, False))

    def close_out(self, at: float) -> None:
        """The run is over: mark what we never heard the end of, so the report says what we know."""
        for rs in self.ranks:
            if rs.pending_exit is not None and rs.state not in FINAL:
                self._fail(rs, rs.pending_exit)
            rs.pending_exit = None
            if rs.settled:
                continue
            if self.stop_reason:
                self._stopped(rs, {}, at)
            else:
                text = self.job_error or "the rank ended without reporting a result (its process or executor was lost)"
                self._lost(rs, {"summary": text.splitlines()[0][:500], "traceback": self.job_error or ""}, at)

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
        if self.stop_reason == "interrupted":
            return RunInterrupted(f"interrupted: every rank was {verb}", self.failures, self.world_size)
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

    # -- questions -----------------------------------------------------------------------------------
    @property
    def settled(self) -> bool:
        return all(r.settled for r in self.ranks)

    def cell_ended(self) -> bool:
        """Kept ranks: every rank reported this cell's end, or is gone."""
        return all(r.state in FINAL for r in self.ranks)

    def hellos_complete(self) -> bool:
        return all(r.said_hello for r in self.ranks)

    def running_ranks(self) -> list[int]:
        return [r.rank for r in self.ranks if r.state not in FINAL]

    def notices(self) -> list[str]:
        """What the user should know that is not a failure."""
        bound = input_notice([r.usage for r in self.ranks], self.data.workers)
        dropped = [f"rank {r.rank}: {r.log_dropped:,} log lines past the budget were dropped"
                   for r in self.ranks if r.log_dropped]
        return self.notes + ([bound] if bound else []) + dropped

    def snapshot(self, *, log_tail: int = LOG_TAIL) -> RunSnapshot:
        """The JSON-able picture of the run every view draws (``views.schema.RunSnapshot``)."""
        from .snapshot import run_snapshot

        return run_snapshot(self, log_tail)


Handler = Callable[[RunState, Any, Any, float], None]

# Every (role, message type) the kernel can receive, and what folds it in. contract.INBOUND == keys.
HANDLERS: Final[dict[tuple[str, str], Handler]] = {
    (C.RANK, C.HELLO): RunState._hello,
    (C.RANK, C.STATE): RunState._state,
    (C.RANK, C.PROGRESS): RunState._progress,
    (C.RANK, C.LOG): RunState._log,
    (C.RANK, C.RESULT): RunState._result,
    (C.RANK, C.FAILED): RunState._failed,
    (C.RANK, C.DROPPED): RunState._dropped,
    (C.RANK, C.USAGE): RunState._usage,
    (C.RANK, C.DATA_OPEN): RunState._data_request,
    (C.RANK, C.DATA_DONE): RunState._data_request,
    (C.RANK, C.CONNECTED): RunState._connected,
    (C.RANK, C.DISCONNECTED): RunState._disconnected,
    (C.AGENT, C.AGENT_HELLO): RunState._agent_hello,
    (C.AGENT, C.EXIT): RunState._exit,
    (C.AGENT, C.CONNECTED): RunState._agent_link,
    (C.AGENT, C.DISCONNECTED): RunState._agent_link,
    (C.BACKEND, C.LOST): RunState._lost,
    (C.BACKEND, C.STOPPED): RunState._stopped,
    (C.BACKEND, C.JOB_END): RunState._job_end,
    (C.BACKEND, C.DATA_STATUS): RunState._data_status,
}
