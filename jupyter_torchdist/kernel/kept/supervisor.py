"""One cell on kept ranks: the one-shot supervisor, with the survive-or-stop rule.

A cell ends when every rank has reported its end. Stopping a cell (a rank's failure, ``--timeout``,
an interrupt) does not kill the ranks: it interrupts them (SIGINT through their agents, so Python code
raises ``KeyboardInterrupt``). If every rank gets back to waiting within ``KEEP_GRACE_S`` the kept
ranks **survive**; if one cannot (stuck in a collective whose peer left it), or a rank's process
died, the set is **broken** and every rank is killed: the kept state is gone.
"""
from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Final

from ...core import contract as C
from ...core.contract import Inbound
from ...core.errors import RunError
from ...core.options import RunOptions
from ..runs.supervisor import ECHO_GRACE_S, Supervisor

__all__ = ["KeptSupervisor", "KEEP_GRACE_S", "SURVIVED", "STOPPED"]

SURVIVED = ("The kept ranks survived: every rank is back waiting for the next cell, with its state as this cell "
            "left it.")
STOPPED = "The kept ranks were stopped ({why}): their state (models, optimizers, variables) is gone. The next " \
          "--keep cell starts new ones."

KEEP_GRACE_S: Final = 3.0     # after an interrupt, how long every rank has to get back to waiting
BREAK_LIMIT_S: Final = 10.0   # after breaking the set, how long to wait for every rank's end
CANCEL_AFTER_S: Final = 2.0   # ... and when to end the launcher's job if the agents have not stopped their ranks
EXIT_GRACE_S: Final = 1.0     # a rank's connection closed: its agent says how it ended within this


class KeptSupervisor(Supervisor):
    """``broken`` says why the kept set had to be stopped during this cell (None: it survives)."""

    broken_at: float | None = None
    closed_at: dict[int, float] | None = None  # ranks whose connection closed, and when

    def handle(self, ev: Inbound) -> None:
        t = ev.msg.get("t")
        if ev.rank == 0 and ev.role == C.RANK and t == C.RESULT and ev.msg.get("cell") == self.state.cell:
            names = ev.msg.get("names")
            self.names = [str(n) for n in names] if isinstance(names, list) else None
        super().handle(ev)
        if ev.role == C.AGENT and t == C.EXIT or ev.role == C.BACKEND and t in (C.LOST, C.JOB_END):
            where = "the launcher's job ended" if ev.rank < 0 else f"rank {ev.rank}'s process ended"
            self.break_set(f"{where} during the cell")
        elif ev.role == C.RANK and t == C.DISCONNECTED and self.broken is None:
            self.closed_at = {**(self.closed_at or {}), ev.rank: time.time()}

    def _release(self, ranks: Iterable[int]) -> None:
        """Kept ranks never exit after a cell: they wait for the next one."""

    def stop(self, reason: str) -> None:
        """Interrupt every rank still running the cell; they survive if they all come back in time."""
        self.debugging.before_stop(reason)  # an interrupt or timeout: where each rank was, first
        now = time.time()
        if not self.state.begin_stop(reason, now):
            return
        self.stop_at, self.dirty = now, True
        for rank in self.state.running_ranks():
            self.server.send(rank, C.AGENT, {"t": C.INTERRUPT})

    def break_set(self, why: str) -> None:
        """Kill every rank of the set now (``stop_all``) and end the launcher's job."""
        if self.broken is not None:
            return
        self.broken, self.broken_at, self.dirty = why, time.time(), True
        self.state.begin_stop("failed", self.broken_at)
        self.server.stop_all("the kept ranks were stopped")  # each agent says how its rank ended, then goes

    def finished(self, now: float) -> bool:
        if self.broken_at is None:
            return self.state.cell_ended()
        return self.state.settled or now - self.broken_at > BREAK_LIMIT_S

    def tick(self, now: float) -> None:
        if self.broken is None and (silent := self.silent(now)):
            lost = min((f for f in self.state.failures.values() if f.kind == "lost"), key=lambda f: f.at)
            self.break_set(f"{lost.label()} {lost.summary}")
            self.launcher.lost_hosts(self.state.lost_hosts(silent))
        if self.first_failure_at is not None and now - self.first_failure_at >= ECHO_GRACE_S \
                and not self.debugging.holding():
            self.stop("failed")
        if self.deadline is not None and now >= self.deadline:
            self.stop("timeout")
        self.debugging.tick(now)
        late = [rank for rank, at in (self.closed_at or {}).items() if now - at > EXIT_GRACE_S]
        if late:
            self.closed_at = None  # no agent said how it ended: the connection closing says enough
            self.break_set(f"rank {late[0]} closed its connection to the kernel")
        if self.broken_at is not None and now - self.broken_at > CANCEL_AFTER_S:
            self.cancel()
        if self.stop_at is not None and now - self.stop_at > KEEP_GRACE_S and not self.state.cell_ended():
            stuck = self.state.running_ranks()
            self.break_set(f"ranks {stuck} did not get back to waiting within {KEEP_GRACE_S:g} s of the "
                           "interrupt (a rank stuck in a collective whose peers left it cannot be interrupted)")
        if self.dirty and now - self.last_frame >= self.frame_s:
            self.draw(now)

    def wait_timeout(self, now: float) -> float:
        waits = [super().wait_timeout(now)]
        if self.stop_at is not None and self.broken is None:
            waits.append(self.stop_at + KEEP_GRACE_S - now)
        waits += [at + EXIT_GRACE_S - now for at in (self.closed_at or {}).values()]
        if self.broken_at is not None and not self.cancelled:
            waits.append(self.broken_at + CANCEL_AFTER_S - now)
        return max(0.0, min(waits))

    def wrap_up(self) -> None:
        """The set goes on after the cell unless it broke (then its job was cancelled already)."""

    def conclude(self, options: RunOptions) -> RunError | None:
        """The cell's outcome, saying whether the kept ranks survived it (the set is closed first if it broke)."""
        if self.broken is not None:
            self.state.close_out(time.time())
        error = self.state.conclude(time.time(), timeout=options.timeout, value_needed=not options.all_ranks)
        self.debugging.annotate(error)
        if self.broken is not None:
            line = STOPPED.format(why=self.broken)
            error = error or RunError(f"the kept ranks were lost: {self.broken}", world_size=options.n)
            self.state.notes.append(line)
            error.extra.append(line)
        elif error is not None:
            self.state.notes.append(SURVIVED)
            error.extra.append(SURVIVED)
        return error
