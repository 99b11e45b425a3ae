"""Drive one run from the kernel: channel in, state updated, view drawn, ranks stopped when needed.

Single-threaded on the caller's thread: events arrive on a queue (from the channel's threads and
the launcher), so a KeyboardInterrupt lands here and nowhere else.
"""
from __future__ import annotations

import contextlib
import queue
import secrets
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import cloudpickle

from .channel import ChannelServer, Inbound
from .errors import RankFailure, RunFailed, RunInterrupted, RunTimeout
from .launchers.base import JOB_END, Launcher
from .options import RunOptions
from .rank_main import RunPlan
from .rendezvous import plan_rendezvous
from .state import RunState

__all__ = ["RunView", "RunResult", "execute", "FRAME_S"]

FRAME_S = 0.1          # the view is redrawn at most this often (about 10 updates a second)
STOP_GRACE_S = 3.0     # after asking ranks to stop, wait this long before cancelling the Spark job
STOP_LIMIT_S = 15.0    # ... and this long in all before giving up on confirmations
SETTLE_GRACE_S = 3.0   # after the job ended, wait this long for the last messages
ECHO_GRACE_S = 1.0     # a peer's "connection closed" may arrive before the real error: wait for it


class RunView(Protocol):
    log_tail: int

    def start(self, snapshot: dict[str, Any]) -> None: ...
    def update(self, snapshot: dict[str, Any]) -> None: ...
    def finish(self, snapshot: dict[str, Any]) -> None: ...


@dataclass
class RunResult:
    value: Any
    values: dict[int, Any]
    state: RunState
    logs: dict[int, list[tuple[str, str]]] = field(default_factory=dict)


class _Supervisor:
    def __init__(self, options: RunOptions, launcher: Launcher, view: RunView, state: RunState) -> None:
        self.options, self.launcher, self.view, self.state = options, launcher, view, state
        self.inbox: queue.SimpleQueue[Inbound] = queue.SimpleQueue()
        self.server: ChannelServer | None = None
        self.hellos: dict[int, dict[str, Any]] = {}
        self.values: dict[int, Any] = {}
        self.job_ended_at: float | None = None
        self.job_error: str | None = None
        self.stop_at: float | None = None
        self.first_failure_at: float | None = None
        self.cancelled = False
        self.dirty = True
        self.last_frame = 0.0

    # -- events ---------------------------------------------------------------------------------
    def handle(self, ev: Inbound) -> None:
        self.dirty = True
        t = ev.msg.get("t")
        if ev.rank < 0:
            if t == JOB_END:
                self.job_ended_at, self.job_error = time.time(), ev.msg.get("error")
            return
        if ev.role == "rank" and t == "hello":
            self.hellos[ev.rank] = ev.msg
            if len(self.hellos) == self.state.world_size and self.stop_at is None:
                self._send_rendezvous()
        if ev.role == "rank" and t == "result" and ev.msg.get("value") is not None:
            self._take_value(ev)
        self.state.apply(ev.rank, ev.role, ev.msg, ev.at)
        if self.state.failures and self.stop_at is None and self.first_failure_at is None:
            self.first_failure_at = time.time()
        if self.stop_at is None and any(not f.secondary for f in self.state.failures.values()):
            self.stop("failed")

    def _send_rendezvous(self) -> None:
        assert self.server is not None
        try:
            messages = plan_rendezvous(self.hellos, self.state.world_size)
        except ValueError as exc:
            self.state.apply(0, "backend", {"t": "lost", "summary": f"rendezvous failed: {exc}"}, time.time())
            return
        for rank, msg in messages.items():
            self.server.send(rank, "rank", msg)

    def _take_value(self, ev: Inbound) -> None:
        try:
            self.values[ev.rank] = cloudpickle.loads(ev.msg["value"])
        except Exception as exc:
            ev.msg.update(t="failed", traceback="",
                          summary=f"the value came back but could not be unpickled in the kernel: "
                                  f"{type(exc).__name__}: {exc}")

    # -- stopping -------------------------------------------------------------------------------
    def stop(self, reason: str) -> None:
        """Ask every rank's agent to kill its rank now; Spark's own cancel follows if needed."""
        if self.stop_at is not None:
            return
        self.stop_at = time.time()
        self.state.stop_reason = reason
        self.state.status = "stopping"
        self.dirty = True
        ended = {r.rank for r in self.state.ranks if r.state in ("done", "failed")}  # exiting by themselves
        told = self.server.stop_all(reason, spare=ended) if self.server else set()  # later agents are told too
        if len(told | ended) < self.state.world_size:
            self._cancel()  # some tasks have no agent to tell yet: only Spark can stop them

    def _cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self.launcher.cancel()

    # -- the loop -------------------------------------------------------------------------------
    def finished(self, now: float) -> bool:
        if self.job_ended_at is None:
            return False
        if self.state.settled or now - self.job_ended_at > SETTLE_GRACE_S:
            return True
        return False

    def tick(self, now: float, deadline: float | None) -> None:
        if self.first_failure_at is not None and now - self.first_failure_at >= ECHO_GRACE_S:
            self.stop("failed")
        if deadline is not None and now >= deadline and self.stop_at is None:
            self.stop("timeout")
        if self.stop_at is not None and now - self.stop_at > STOP_GRACE_S:
            self._cancel()
        if self.dirty and now - self.last_frame >= FRAME_S:
            self.draw(now)

    def draw(self, now: float) -> None:
        self.state.now = now
        self.view.update(self.state.snapshot(log_tail=self.view.log_tail))
        self.dirty, self.last_frame = False, now

    def wait_timeout(self, now: float, deadline: float | None) -> float:
        waits = [FRAME_S if self.dirty else 1.0]
        if deadline is not None and self.stop_at is None:
            waits.append(deadline - now)
        if self.stop_at is not None:
            waits.append(self.stop_at + STOP_GRACE_S - now)
        if self.job_ended_at is not None:
            waits.append(self.job_ended_at + SETTLE_GRACE_S - now)
        if self.first_failure_at is not None and self.stop_at is None:
            waits.append(self.first_failure_at + ECHO_GRACE_S - now)
        return max(0.0, min(waits))

    def loop(self, deadline: float | None) -> None:
        while True:
            now = time.time()
            if self.finished(now):
                return
            if self.stop_at is not None and now - self.stop_at > STOP_LIMIT_S:
                return
            try:
                try:
                    ev = self.inbox.get(timeout=self.wait_timeout(now, deadline))
                    self.handle(ev)
                    for _ in range(10_000):  # drain what else is there before drawing
                        self.handle(self.inbox.get_nowait())
                except queue.Empty:
                    pass
                self.tick(time.time(), deadline)
            except KeyboardInterrupt:
                self.stop("interrupted")


def _close_out(sup: _Supervisor) -> None:
    """Mark ranks we never heard the end of, so the report says what we know."""
    now = time.time()
    sup.state.settle_pending_exits()
    for rs in sup.state.ranks:
        if rs.settled:
            continue
        if sup.state.stop_reason:
            sup.state.apply(rs.rank, "backend", {"t": "stopped"}, now)
        else:
            summary = sup.job_error or "the rank ended without reporting a result (its process or executor was lost)"
            sup.state.apply(rs.rank, "backend", {"t": "lost", "summary": summary.splitlines()[0][:500],
                                                 "traceback": sup.job_error or ""}, now)


def _outcome(sup: _Supervisor, timeout: float | None) -> None:
    st = sup.state
    reason = st.stop_reason
    if reason == "timeout":
        still = [r.rank for r in st.ranks if r.state == "stopped"]
        st.status = "timeout"
        st.headline = f"timed out after {timeout:g} s; ranks still running were stopped: {still}"
        raise RunTimeout(dict(st.failures), st.world_size, headline=st.headline)
    if reason == "interrupted":
        st.status = "interrupted"
        st.headline = "interrupted: every rank was stopped"
        raise RunInterrupted(dict(st.failures), st.world_size, headline=st.headline)
    if st.failures:
        st.status = "failed"
        err = RunFailed(dict(st.failures), st.world_size)
        st.headline = str(err)
        raise err
    if 0 not in sup.values and not sup.options.all_ranks:
        st.status = "failed"
        failure = RankFailure(0, st.ranks[0].host, "lost", "rank 0 finished but its value never arrived")
        raise RunFailed({0: failure}, st.world_size)
    st.status = "succeeded"


@contextlib.contextmanager
def _plain_sigint() -> Any:
    """Ctrl-C / the stop button raises KeyboardInterrupt here, not PySpark's cancelAllJobs handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def execute(payload: bytes, options: RunOptions, launcher: Launcher, view: RunView, *,
            filename: str = "<distributed>", source: str = "", title: str = "") -> RunResult:
    """Run ``payload`` (from ``capture.pack``) on ``options.n`` ranks; return rank 0's value or raise."""
    info = launcher.prepare(options)
    state = RunState(options.n, title=title, options=options.summary(), backend=info.label,
                     started_at=time.time())
    sup = _Supervisor(options, launcher, view, state)
    max_value = int(options.max_value_mb * (1 << 20))
    for warning in info.warnings:
        print(f"jupyter-torchdist warning: {warning}", file=sys.stderr)
    sup.server = ChannelServer(options.n, host=info.channel_host, max_frame=max_value + (8 << 20),
                               inbox=sup.inbox, tls=info.channel_tls)
    plan = RunPlan(run_id=secrets.token_hex(6), world_size=options.n, address=sup.server.address,
                   secret=sup.server.secret, payload=payload, filename=filename, source=source,
                   gpu=options.gpu, threads=options.backend_threads, max_value_bytes=max_value,
                   all_ranks=options.all_ranks, loopback=info.loopback, tls=sup.server.tls_pin)
    deadline = None if options.timeout is None else state.started_at + options.timeout
    result = RunResult(value=None, values=sup.values, state=state)
    try:
        view.start(state.snapshot(log_tail=view.log_tail))
        launcher.start(plan, sup.inbox)
        with _plain_sigint():
            sup.loop(deadline)
        if sup.job_ended_at is None:
            sup._cancel()
        _close_out(sup)
        _outcome(sup, options.timeout)
    except BaseException as exc:
        exc.result = result  # type: ignore[attr-defined]  (logs and state of a failed run stay reachable)
        raise
    finally:
        sup.server.close()
        state.ended_at = state.now = time.time()
        if state.status in ("starting", "running", "stopping"):
            state.status = "failed"
        result.logs = {r.rank: list(r.logs) for r in state.ranks}
        view.finish(state.snapshot(log_tail=view.log_tail))
    result.value = [sup.values.get(r) for r in range(options.n)] if options.all_ranks else sup.values.get(0)
    return result
