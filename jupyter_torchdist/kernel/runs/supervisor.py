"""Drive one run from the kernel: move messages from the channel into the state, and keep time.

Single-threaded on the caller's thread: events arrive on a queue (from the channel's threads and
the launcher), so a KeyboardInterrupt lands here and nowhere else. Every decision about what the
run *is* (stopping, failed, timed out) is a transition of ``RunState``; this loop only decides
*when* (deadlines, graces) and carries the consequences out (rendezvous, stop, cancel, redraw).
"""
from __future__ import annotations

import contextlib
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

import cloudpickle

from ...core import contract as C
from ...channel.server import ChannelServer
from ...core.contract import Inbound
from ...core.errors import RunError
from ...launchers.base import Launcher
from ...core.options import RunOptions
from ...views import RunView
from ...core.rendezvous import plan_rendezvous
from .debugging import Debugging
from ..state.rank import RankState
from ..state.run import RunState

__all__ = ["Supervisor", "plain_sigint", "FRAME_S"]

FRAME_S: Final = 0.1          # the view is redrawn at most this often (about 10 updates a second)
STOP_GRACE_S: Final = 3.0     # after asking ranks to stop, wait this long before cancelling the launcher's job
STOP_LIMIT_S: Final = 15.0    # ... and this long in all before giving up on confirmations
TICK_S: Final = 0.05          # the timed checks (silence, stall, deadlines, the frame) run at most this often
FOCUS_MAX: Final = 8           # ranks the view may have opened at once
SETTLE_GRACE_S: Final = 3.0   # after the job ended, wait this long for the last messages
ECHO_GRACE_S: Final = 1.0     # a peer's "connection closed" may arrive before the real error: wait for it
# A running rank's sampler says something every second; this long without a word, its host, link or executor is
# gone (a link down sends no reset: nothing else would tell). Well above what a slow or busy link delays it by.
SILENCE_S: Final = 10.0


class Supervisor:
    """One run's loop: ``run_until_done`` returns once every rank is accounted for (or we gave up)."""

    broken: str | None = None        # why the ranks had to be killed and cannot take another cell (kept ranks)
    names: list[str] | None = None   # the global names rank 0's own code defined (kept ranks)
    held_stop: Inbound | None = None  # a sweep's early stop that came after every rank's last step (moot so far)

    def __init__(self, state: RunState, server: ChannelServer, launcher: Launcher, view: RunView,
                 inbox: queue.SimpleQueue[Inbound], deadline: float | None, *,
                 tap: Callable[[Inbound], None] | None = None,
                 listener: Callable[[Inbound], None] | None = None) -> None:
        self.state, self.server, self.launcher, self.view = state, server, launcher, view
        self.inbox, self.deadline = inbox, deadline
        self.tap = tap            # the run's recorder (--track, --profile): its ranks' reports
        self.listener = listener  # a sweep's judge: each report as it arrives (never raises)
        self.values: dict[int, Any] = {}
        self.stop_at: float | None = None
        self.first_failure_at: float | None = None
        self.cancelled = False
        self.released = False
        self.released_live = False  # released with every rank connected: their results came live (``returned``)
        self.dirty = True
        self.last_frame = 0.0
        self.frame_s = FRAME_S  # the view may ask for a slower pace (its byte budget)
        self.focus: frozenset[int] = frozenset()  # ranks the view opened, asked over the control channel
        self.silence_checked = 0.0
        self.data: Any = None  # the run's data.service.DataService: answers batches() requests
        self.debugging = Debugging(self)  # where each rank is; the ranks' pdb in the notebook

    # -- messages ---------------------------------------------------------------------------------
    def handle(self, ev: Inbound) -> None:
        self.dirty = True
        t = ev.msg.get("t")
        if self.listener is not None and ev.role == C.RANK and t == C.PROGRESS:
            self.listener(ev)   # before anything else: a rule's stop at a rung goes out at once
        if self.tap is not None and ev.role == C.RANK and t in (C.PROGRESS, C.PROFILE):
            self._record(ev)
        if ev.role == C.BACKEND and t == C.STOP_WANTED and ev.msg.get("early") and self.state.took_every_step():
            self.held_stop = ev   # a sweep's rule judged this member, which has since taken its last step: it
            return                # ends done, unless a rank steps on (a total per epoch): then it stops
        self.state.apply(ev.rank, ev.role, ev.msg, ev.at)
        if ev.role == C.RANK and self.data is not None:
            if t in (C.DATA_OPEN, C.DATA_DONE):
                self.data.handle(ev)
            elif t in (C.RESULT, C.FAILED):
                self.data.rank_ended(ev.rank)
        if ev.role == C.RANK and t == C.HELLO and self.state.hellos_complete() and self.stop_at is None:
            self._send_rendezvous()
        if ev.role == C.RANK and t == C.RESULT and ev.msg.get("value") is not None:
            self._take_value(ev)
        if ev.role == C.RANK and ev.msg["t"] == C.PREEMPTED:
            self._preempt(ev.rank, float(ev.msg.get("grace_s") or 0.0))
        self.debugging.handle(ev)
        if ev.role == C.BACKEND and t == C.STOP_WANTED and not self.state.all_ended():
            self.stop("interrupted")  # run.stop(), a background run's Stop: this run only (once every rank has
            # ended its cell there is nothing to stop: the run ends as its ranks did)
        if ev.role == C.BACKEND and ev.msg["t"] == C.FOCUS_WANTED:
            self.focus, self.frame_s = frozenset(ev.msg["ranks"][:FOCUS_MAX]), 0.0  # shown in full at once
        if self.state.failures and self.first_failure_at is None:
            self.first_failure_at = time.time()
            self.frame_s = 0.0  # the root cause is drawn at once, whatever pace the view asked for
        if any(not f.secondary for f in self.state.failures.values()) and not self.debugging.holding():
            self.stop("failed")
        if t in (C.RESULT, C.FAILED) and not self.released and self.state.all_ended():
            self._release(range(self.state.world_size))
        if self.held_stop is not None and t == C.PROGRESS and not self.state.took_every_step():
            held, self.held_stop = self.held_stop, None
            self.handle(held)

    def _preempt(self, rank: int, grace_s: float) -> None:
        """A rank was told to go: every rank hears it (``jt.preempted()``), so all of them commit in its grace."""
        for other in range(self.state.world_size):
            self.server.send(other, C.RANK, {"t": C.PREEMPT, "rank": rank, "grace_s": grace_s})

    def _record(self, ev: Inbound) -> None:
        """Hand the recorder what it keeps; its failure is said once and never costs the run."""
        try:
            assert self.tap is not None
            self.tap(ev)
        except Exception as exc:
            self.tap = None
            self.state.notes.append(f"warning: the run's record stopped: {type(exc).__name__}: {exc}")

    def _release(self, ranks: Any) -> None:
        """Every rank has ended its cell: let them exit (none may go while a peer still needs it)."""
        self.released = True
        self.released_live = self.stop_at is None and len(self.server.connected(C.RANK)) == self.state.world_size
        for rank in ranks:
            self.server.send(rank, C.RANK, {"t": C.RELEASE})

    def _send_rendezvous(self) -> None:
        hellos = {r.rank: r.hello for r in self.state.ranks if r.hello is not None}
        try:
            messages = plan_rendezvous(hellos, self.state.world_size)
        except ValueError as exc:
            self.state.apply(0, C.BACKEND, {"t": C.LOST, "summary": f"rendezvous failed: {exc}"}, time.time())
            return
        for rank, msg in messages.items():
            self.server.send(rank, C.RANK, msg)

    def _take_value(self, ev: Inbound) -> None:
        try:
            self.values[ev.rank] = cloudpickle.loads(ev.msg.get("value"))
        except Exception as exc:
            self.state.reject_value(ev.rank, f"the value came back but could not be unpickled in the kernel: "
                                             f"{type(exc).__name__}: {exc}", time.time())

    # -- stopping ----------------------------------------------------------------------------------
    def stop(self, reason: str) -> None:
        """Ask every rank's agent to kill its rank now; the launcher's own cancel follows if needed."""
        self.debugging.before_stop(reason)  # an interrupt or timeout: where each rank was, first
        now = time.time()
        if not self.state.begin_stop(reason, now):
            return
        self.stop_at, self.dirty, self.frame_s = now, True, 0.0  # "stopping" is drawn at once
        ended = {r.rank for r in self.state.ranks if r.state in ("done", "failed")}  # they exit by themselves
        self._release(ended)
        told = self.server.stop_all(reason, spare=ended)  # agents that connect later are told too
        if len(told | ended) < self.state.world_size:
            self.cancel()  # some tasks have no agent to tell yet: only the launcher can stop them

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self.launcher.cancel()

    # -- time ----------------------------------------------------------------------------------------
    def silent(self, now: float) -> list[RankState]:
        """Ranks silent past ``SILENCE_S``, now lost: looked for once a second (it looks at every rank)."""
        if now - self.silence_checked < 1.0:
            return []
        self.silence_checked = now
        return self.state.lose_silent(now, SILENCE_S)

    def finished(self, now: float) -> bool:
        ended = self.state.job_ended_at
        if ended is None:
            return self.returned()
        return self.state.settled or now - ended > SETTLE_GRACE_S

    def returned(self) -> bool:
        """Every rank returned its cell's result over the live channel, and each rank's agent has seen its process end:
        the run has its outcome and no rank process is left, so nobody need wait for the launcher's job to end (the
        agents' own exits, then the Spark tasks' and job's: tens of milliseconds of a rerun's 200). The job ends by
        itself; ``RankSet.end_cell`` sees that it does. A run whose results were replayed from an offline record
        (``launchers/connect.py``) waits for the job's end, which carries what the notebook must be told."""
        return self.released_live and self.stop_at is None and not self.state.failures and self.state.settled \
            and all(r.state == "done" for r in self.state.ranks)

    def tick(self, now: float) -> None:
        if self.stop_at is None and (silent := self.silent(now)):
            self.stop("failed")
            self.cancel()  # the lost rank's task cannot be told to stop: only the launcher ends it
            self.launcher.lost_hosts(self.state.lost_hosts(silent))  # no later run is placed there
        if self.state.start_overdue(now) and self.stop_at is None:
            self.state.fail_unstarted(now)
            self.stop("failed")
        elif self.state.start_by is not None and now - self.last_frame >= 1.0:
            self.dirty = True  # the wait for executors counts up in the view
        if self.first_failure_at is not None and now - self.first_failure_at >= ECHO_GRACE_S \
                and not self.debugging.holding():
            self.stop("failed")
        if self.deadline is not None and now >= self.deadline:
            self.stop("timeout")
        if self.stop_at is not None and now - self.stop_at > STOP_GRACE_S:
            self.cancel()
        self.debugging.tick(now)
        if self.dirty and now - self.last_frame >= self.frame_s:
            self.draw(now)

    def draw(self, now: float) -> None:
        self.state.now = now
        focus = self.view.focus | self.focus
        hold = self.view.update(dict(self.state.snapshot(log_tail=self.view.log_tail, focus=focus)))
        # a view that paces itself gets its next frame after the time it asked for, whether or not more came
        self.dirty, self.last_frame = hold is not None, now
        self.frame_s = FRAME_S if hold is None else max(FRAME_S, hold)

    def wait_timeout(self, now: float) -> float:
        waits = [max(0.0, self.last_frame + self.frame_s - now) if self.dirty else 1.0]
        if self.deadline is not None and self.stop_at is None:
            waits.append(self.deadline - now)
        if self.stop_at is not None:
            waits.append(self.stop_at + STOP_GRACE_S - now)
        if self.state.job_ended_at is not None:
            waits.append(self.state.job_ended_at + SETTLE_GRACE_S - now)
        if self.first_failure_at is not None and self.stop_at is None:
            waits.append(self.first_failure_at + ECHO_GRACE_S - now)
        if self.state.start_by is not None and self.stop_at is None:
            waits.append(self.state.start_by - now)
        return max(0.0, min(waits))

    def _drain(self, now: float) -> None:
        """Handle messages until the next timed check is due, and for at least ``TICK_S`` once one came: the timed
        checks each look at every rank, so with a thousand ranks they must not run once per message. The message
        that ends the run ends the wait at once (a kept cell that ends in a blink must not wait out the tick)."""
        try:
            self.handle(self.inbox.get(timeout=self.wait_timeout(now)))
            until = time.time() + TICK_S
            while not self.finished(now := time.time()) and (left := until - now) > 0:
                self.handle(self.inbox.get(timeout=left))
        except queue.Empty:
            pass

    def run_until_done(self) -> None:
        """Move messages until the run is over; Ctrl-C (or the Stop button) stops the ranks, then waits."""
        while True:
            now = time.time()
            if self.finished(now) or (self.stop_at is not None and now - self.stop_at > STOP_LIMIT_S):
                break
            try:
                self._drain(now)
                self.tick(time.time())
            except KeyboardInterrupt:
                self.stop("interrupted")
        self.wrap_up()

    def wrap_up(self) -> None:
        """The loop is over: whatever the launcher still runs for this run goes (unless every rank returned: then it
        ends by itself, ``returned``)."""
        if self.state.job_ended_at is None and not self.returned():
            self.cancel()

    def conclude(self, options: RunOptions) -> RunError | None:
        """The run's outcome once the loop is over: None for a success, else the error to raise."""
        self.state.close_out(time.time())
        error = self.state.conclude(time.time(), timeout=options.timeout, value_needed=not options.all_ranks)
        self.debugging.annotate(error)
        return error


@contextlib.contextmanager
def plain_sigint() -> Iterator[None]:
    """Ctrl-C / the stop button raises KeyboardInterrupt here, not PySpark's cancelAllJobs handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
