"""What we know about a run, built only from messages: no I/O, no threads, no clocks of its own.

``RunState.apply`` folds one inbound message into the state; ``snapshot`` turns the state into
the JSON-able dict every view draws (live widget, text, and the saved run report).
"""
from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from typing import Any

from .errors import RankFailure, is_secondary

__all__ = ["RankState", "RunState", "LOG_TAIL", "HISTORY_POINTS"]

LOG_TAIL = 200          # lines per rank in a snapshot
LOG_KEEP = 20_000       # lines per rank kept in the kernel
HISTORY_POINTS = 400    # loss-curve points kept per rank
LOSS_KEYS = ("loss", "train_loss", "training_loss")
FINAL = ("done", "failed", "stopped")


@dataclass
class RankState:
    rank: int
    host: str = ""
    pid: int | None = None
    state: str = "pending"  # pending, starting, running, done, failed, stopped
    step: int | None = None
    total: int | None = None
    rate: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    last_line: str = ""
    logs: collections.deque[tuple[str, str]] = field(default_factory=lambda: collections.deque(maxlen=LOG_KEEP))
    log_lines: int = 0
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    exit_signal: str | None = None
    failure: RankFailure | None = None
    has_result: bool = False
    agent_exited: bool = False
    rank_connected: bool = False                # the rank's own connection is open: its messages may be in flight
    pending_exit: RankFailure | None = None     # the agent saw the rank die; judged once that connection drains
    history: list[tuple[float, float]] = field(default_factory=list)
    _rate_mark: tuple[float, int] | None = None

    @property
    def settled(self) -> bool:
        return self.state in FINAL and (self.agent_exited or self.state == "stopped")


def _number(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else str(value)
    return str(value)[:80]


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

    def __post_init__(self) -> None:
        if not self.ranks:
            self.ranks = [RankState(r) for r in range(self.world_size)]

    # -- folding messages ------------------------------------------------------------------
    def apply(self, rank: int, role: str, msg: dict[str, Any], at: float) -> None:
        rs = self.ranks[rank]
        handler = getattr(self, f"_on_{role}_{msg.get('t')}", None)
        if handler is not None:
            handler(rs, msg, at)

    def _on_rank_hello(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        rs.host = str(msg.get("host") or rs.host)
        rs.pid = msg.get("pid")
        if rs.state == "pending":
            rs.state, rs.started_at = "starting", at

    def _on_agent_agent(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        rs.host = rs.host or str(msg.get("host") or "")
        if rs.state == "pending":
            rs.state, rs.started_at = "starting", at

    def _on_rank_state(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        if rs.state not in FINAL and msg.get("state") in ("starting", "running"):
            rs.state = msg["state"]
            if self.status == "starting" and rs.state == "running":
                self.status = "running"

    def _on_rank_progress(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        when = float(msg.get("at") or at)
        step, total = msg.get("step"), msg.get("total")
        if isinstance(step, (int, float)) and not isinstance(step, bool):
            self._update_rate(rs, when, int(step))
            rs.step = int(step)
        if isinstance(total, (int, float)) and not isinstance(total, bool):
            rs.total = int(total)
        metrics = msg.get("metrics") or {}
        if isinstance(metrics, dict):
            for key, value in metrics.items():
                rs.metrics[str(key)[:40]] = _number(value)
            self._record_loss(rs, metrics)

    def _update_rate(self, rs: RankState, when: float, step: int) -> None:
        mark = rs._rate_mark
        if mark is None or step < mark[1]:
            rs._rate_mark = (when, step)
            return
        dt = when - mark[0]
        if dt >= 0.5:
            inst = (step - mark[1]) / dt
            rs.rate = inst if rs.rate is None else 0.5 * rs.rate + 0.5 * inst
            rs._rate_mark = (when, step)

    def _record_loss(self, rs: RankState, metrics: dict[str, Any]) -> None:
        for key in LOSS_KEYS:
            value = metrics.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                x = float(rs.step if rs.step is not None else len(rs.history))
                rs.history.append((x, float(value)))
                if len(rs.history) > HISTORY_POINTS:
                    rs.history = rs.history[::2]  # keep the whole curve, at half the resolution
                return

    def _on_rank_log(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        text = str(msg.get("text", ""))
        stream = "stderr" if msg.get("stream") == "stderr" else "stdout"
        rs.logs.append((stream, text))
        rs.log_lines += 1
        if text.strip():
            rs.last_line = text.strip()[:300]

    def _on_rank_result(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        rs.has_result = True
        rs.state, rs.ended_at = "done", float(msg.get("at") or at)
        if rs.rank == 0 and msg.get("repr") is not None:
            self.value_repr = str(msg["repr"])

    def _on_rank_failed(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        summary = str(msg.get("summary", "failed"))
        tb = str(msg.get("traceback", ""))
        self._fail(rs, RankFailure(rs.rank, rs.host, "exception", summary, tb,
                                   float(msg.get("at") or at), is_secondary(summary, tb)))

    def _on_agent_exit(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
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

    def _on_rank_connected(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        rs.rank_connected = True

    def _on_rank_disconnected(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        rs.rank_connected = False
        if rs.pending_exit is not None and rs.state not in FINAL:
            self._fail(rs, rs.pending_exit)
        rs.pending_exit = None

    def _on_backend_lost(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        """The launcher lost this rank (executor gone, job failed before it reported)."""
        rs.agent_exited = True
        if rs.state in FINAL:
            return
        summary = str(msg.get("summary", "lost"))
        self._fail(rs, RankFailure(rs.rank, rs.host, "lost", summary, str(msg.get("traceback", "")), at,
                                   is_secondary(summary)))

    def _on_backend_stopped(self, rs: RankState, msg: dict[str, Any], at: float) -> None:
        rs.agent_exited = True
        if rs.state not in FINAL:
            rs.state, rs.ended_at = "stopped", at

    def _fail(self, rs: RankState, failure: RankFailure) -> None:
        rs.state, rs.ended_at, rs.failure = "failed", failure.at, failure
        self.failures.setdefault(rs.rank, failure)

    def settle_pending_exits(self) -> None:
        """The run is over: an exit still waiting for its rank's connection to drain is final now."""
        for rs in self.ranks:
            if rs.pending_exit is not None and rs.state not in FINAL:
                self._fail(rs, rs.pending_exit)
            rs.pending_exit = None

    # -- questions ---------------------------------------------------------------------------
    @property
    def settled(self) -> bool:
        return all(r.settled for r in self.ranks)

    def running_ranks(self) -> list[int]:
        return [r.rank for r in self.ranks if r.state not in FINAL]

    def snapshot(self, *, log_tail: int = LOG_TAIL) -> dict[str, Any]:
        """JSON-able picture of the run for any view."""
        end = self.ended_at if self.ended_at is not None else self.now
        root = None
        if self.failures:
            from .errors import root_cause
            r = root_cause(self.failures)
            root = {"rank": r.rank, "host": r.host, "kind": r.kind, "summary": r.summary,
                    "traceback": r.traceback,
                    "secondary": [{"rank": f.rank, "host": f.host, "summary": f.summary}
                                  for f in sorted(self.failures.values(), key=lambda f: f.rank)
                                  if f.rank != r.rank]}
        return {
            "version": 1, "title": self.title, "status": self.status, "headline": self.headline,
            "backend": self.backend, "options": dict(self.options), "world_size": self.world_size,
            "elapsed_s": round(max(0.0, end - self.started_at), 3),
            "value_repr": self.value_repr, "error": root,
            "ranks": [self._rank_snapshot(r, end, log_tail) for r in self.ranks],
        }

    @staticmethod
    def _rank_snapshot(r: RankState, end: float, log_tail: int) -> dict[str, Any]:
        stop = r.ended_at if r.ended_at is not None else end
        tail = list(r.logs)[-log_tail:] if log_tail else []
        return {
            "rank": r.rank, "host": r.host, "state": r.state, "step": r.step, "total": r.total,
            "rate": None if r.rate is None else round(r.rate, 3), "metrics": dict(r.metrics),
            "last_line": r.last_line,
            "elapsed_s": None if r.started_at is None else round(max(0.0, stop - r.started_at), 3),
            "exit_code": r.exit_code, "exit_signal": r.exit_signal,
            "error": r.failure.summary if r.failure else None,
            "log_lines": r.log_lines, "log_tail": [[s, t] for s, t in tail],
            "loss_history": [[x, round(y, 6)] for x, y in r.history],
        }
