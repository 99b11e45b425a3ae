"""One rank as the kernel knows it, and how each message about it folds in: pure, no I/O, no clock.

Each ``on_*`` method takes one message type of the contract. Fields are read with ``.get``: a message that
came over the channel has its fields' types checked, but a field may be absent (a test's minimal message).
What a message means for the whole run (the run's status, its failures, a kept cell's number) is
``RunState``'s to decide: a method returns the ``RankFailure`` it found, and the run records it.
"""
from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from typing import Any, Final

from ...core import contract as C
from ...core.errors import RankFailure, is_secondary
from ...views.schema import LOSS_KEYS
from .places import RankDebug
from .resource_use import RankUsage, fold_usage

__all__ = ["RankState", "FINAL", "LOG_KEEP", "HISTORY_POINTS"]

LOG_KEEP: Final = 20_000       # lines per rank kept in the kernel
HISTORY_POINTS: Final = 400    # loss-curve points kept per rank
FINAL: Final = ("done", "failed", "stopped")


def _number(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else str(value)
    return str(value)[:80]


def _int_or_none(value: float | None) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass
class RankState:
    rank: int
    host: str = ""
    ip: str = ""
    pid: int | None = None
    store_port: int | None = None               # rank 0: where its TCPStore listens
    hello: C.HelloMsg | None = None             # what the rank said of itself (the rendezvous is planned from it)
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
    last_word: float | None = None  # when the rank or its agent last said anything, once its agent beats
    has_result: bool = False
    agent_exited: bool = False
    rank_connected: bool = False                # the rank's own connection is open: its messages may be in flight
    pending_exit: RankFailure | None = None     # the agent saw the rank die; judged once that connection drains
    history: list[tuple[float, float]] = field(default_factory=list)
    rate_mark: tuple[float, int] | None = None
    usage: RankUsage = field(default_factory=RankUsage)
    debug: RankDebug = field(default_factory=RankDebug)  # where it is: its collective, its stack, pdb (places.py)
    preempted_at: float | None = None           # its process was told to go (SIGTERM): it exits after its grace
    profile: dict[str, Any] | None = None      # --profile: its window's steps, shares and note (not the trace)

    @property
    def settled(self) -> bool:
        """Ended, and nothing more will come about it."""
        return self.state in FINAL and (self.agent_exited or self.state == "stopped")

    @property
    def ended(self) -> bool:
        return self.state in FINAL

    def fail(self, failure: RankFailure) -> None:
        self.state, self.ended_at, self.failure = "failed", failure.at, failure

    def _begin(self, at: float) -> None:
        if self.state == "pending":
            self.state, self.started_at = "starting", at

    # -- what the rank says ---------------------------------------------------------------------------
    @property
    def where(self) -> str:
        """The rank's host as people read it: its name, and the address it reached the kernel from where that
        is not loopback (two hosts may share a name: Debian's 127.0.1.1 layout, cloned images)."""
        if self.ip and not self.ip.startswith("127.") and self.ip not in (self.host, "::1"):
            return f"{self.host} ({self.ip})" if self.host else self.ip
        return self.host

    def on_hello(self, msg: C.HelloMsg, at: float) -> None:
        self.host, self.ip = msg.get("host") or self.host, msg.get("ip") or ""
        self.pid, self.store_port, self.said_hello = msg.get("pid"), msg.get("store_port"), True
        self.hello = msg
        self._begin(at)

    def on_state(self, msg: C.StateMsg) -> bool:
        """Starting (the group forms) or running (the cell's code runs); False if not taken."""
        state = msg.get("state")
        if self.ended or state not in ("starting", "running"):
            return False
        self.state = state
        return True

    def on_profile(self, msg: C.ProfileMsg) -> None:
        self.profile = {"first": msg.get("first"), "last": msg.get("last"), "shares": dict(msg.get("shares") or {}),
                        "note": msg.get("note"), "trace": msg.get("trace") is not None}

    def on_progress(self, msg: C.ProgressMsg, at: float) -> None:
        when = msg.get("at") or at
        step, total = _int_or_none(msg.get("step")), _int_or_none(msg.get("total"))
        if step is not None:
            self._update_rate(when, step)
            self.step = step
        if total is not None:
            self.total = total
        metrics = msg.get("metrics") or {}
        if isinstance(metrics, dict):
            for key, value in metrics.items():
                self.metrics[str(key)[:40]] = _number(value)
            self._record_loss(metrics)

    def _update_rate(self, when: float, step: int) -> None:
        mark = self.rate_mark
        if mark is None or step < mark[1]:
            self.rate_mark = (when, step)
            return
        dt = when - mark[0]
        if dt >= 0.5:
            inst = (step - mark[1]) / dt
            self.rate = inst if self.rate is None else 0.5 * self.rate + 0.5 * inst
            self.rate_mark = (when, step)

    def _record_loss(self, metrics: dict[str, Any]) -> None:
        for key in LOSS_KEYS:
            value = metrics.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                x = float(self.step if self.step is not None else len(self.history))
                self.history.append((x, float(value)))
                if len(self.history) > HISTORY_POINTS:
                    self.history = self.history[::2]  # keep the whole curve, at half the resolution
                return

    def on_log(self, msg: C.LogMsg) -> None:
        text = msg.get("text") or ""
        self.logs.append(("stderr" if msg.get("stream") == "stderr" else "stdout", text))
        self.log_lines += 1
        if text.strip():
            self.last_line = text.strip()[:300]

    def on_dropped(self, msg: C.DroppedMsg) -> None:
        lines = _int_or_none(msg.get("log_lines"))
        if lines is not None:
            self.log_dropped = max(self.log_dropped, lines)  # counts are cumulative: late or repeated ones are fine

    def on_usage(self, msg: C.UsageMsg, at: float) -> None:
        fold_usage(self.usage, msg, at)
        self.last_word = at  # its sampler says something every second from now on: silence means it is gone

    def heard(self, at: float) -> None:
        """Any word from the rank or its agent (once they are known to send heartbeats)."""
        if self.last_word is not None:
            self.last_word = max(self.last_word, at)

    def silent_for(self, at: float) -> float:
        """Seconds since a rank that sends a heartbeat last said anything (0 if it does not, or has ended)."""
        if self.last_word is None or self.ended or self.state not in ("starting", "running"):
            return 0.0
        return at - self.last_word

    def on_silence(self, waited: float, at: float) -> RankFailure:
        """Nothing from the rank for ``waited`` seconds while it ran: its host, link or executor is gone, and
        nothing more will come about it (its agent cannot say how it ended: the run need not wait for that)."""
        self.agent_exited = True
        return RankFailure(self.rank, self.where, "lost", f"lost: no word from it for {waited:.0f} s (its host or "
                           "its link went away, its executor was killed, or its process is frozen)", "", at, False)

    def on_result(self, msg: C.ResultMsg, at: float) -> bool:
        """The cell ended with a value; False if the rank had ended already (the result does not count)."""
        if self.ended:
            return False
        self.has_result = True
        self.state, self.ended_at = "done", msg.get("at") or at
        return True

    def on_failed(self, msg: C.FailedMsg, at: float, *, stopping: bool, stopped_by_user: bool = False) \
            -> RankFailure | None:
        """The cell raised. Interrupted while the run is ``stopping``: we asked for it, stopped (None). So is an echo of
        a peer's end (gloo's "Connection closed by peer") once the user stopped the run (``stopped_by_user``: a Stop,
        an interrupt, a timeout): the peer was killed first, and this rank would have been the next moment. Its place
        before the stop is what the report says, not a traceback of the stop's making as the run's root cause."""
        when = msg.get("at") or at
        summary, tb = msg.get("summary", "failed"), msg.get("traceback", "")
        secondary = is_secondary(summary, tb)
        if stopping and not self.ended and (msg.get("interrupted") or (stopped_by_user and secondary)):
            self.state, self.ended_at = "stopped", when
            return None
        return RankFailure(self.rank, self.where, "exception", summary, tb, when, secondary)

    # -- what its agent says ----------------------------------------------------------------------------
    def on_agent_hello(self, msg: C.AgentHelloMsg, at: float) -> None:
        self.host = self.host or msg.get("host") or ""
        self.last_word = at  # its agent says BEAT from now on: silence means the host or its link is gone
        self._begin(at)

    def on_exit(self, msg: C.ExitMsg, at: float) -> RankFailure | None:
        """The rank's process ended: a failure unless it had ended its cell (or we stopped it)."""
        self.agent_exited = True
        self.exit_code, self.exit_signal = msg.get("code"), msg.get("signal")
        if self.ended:
            return None
        if msg.get("stopped"):
            self.state, self.ended_at = "stopped", at
            return None
        how = f"killed by {self.exit_signal}" if self.exit_signal else f"exited with code {self.exit_code}"
        hint = " (out of memory? the kernel's OOM killer sends SIGKILL)" if self.exit_signal == "SIGKILL" else ""
        said = f"the rank's process {how}{hint} before finishing the cell"
        if self.preempted_at is not None:   # told to go (rank/preemption.py): it went after its grace
            said = (f"the rank's process was told to go (SIGTERM) and ended {max(0.0, at - self.preempted_at):.0f} s "
                    "later, before finishing the cell")
        failure = RankFailure(self.rank, self.where, "exit", said, "", msg.get("at") or at, False,
                              signal=self.exit_signal)
        if self.rank_connected:
            # The agent's socket and the rank's are read by different threads: the rank's result or
            # traceback may still be on its way. Judge when its connection has drained.
            self.pending_exit = failure
            return None
        return failure

    # -- what the kernel's channel and launcher say about it ----------------------------------------------
    def on_connected(self) -> None:
        self.rank_connected = True

    def on_disconnected(self) -> RankFailure | None:
        """The rank's connection drained: an exit its agent reported before now stands (if nothing ended it)."""
        self.rank_connected = False
        failure, self.pending_exit = self.pending_exit, None
        return failure if not self.ended else None

    def on_lost(self, summary: str, traceback: str, at: float) -> RankFailure | None:
        """The launcher lost this rank (executor gone, job failed before it reported)."""
        self.agent_exited = True
        if self.ended:
            return None
        return RankFailure(self.rank, self.where, "lost", summary, traceback, at, is_secondary(summary))

    def on_stopped(self, at: float) -> None:
        self.agent_exited = True
        if not self.ended:
            self.state, self.ended_at = "stopped", at
