"""The ranks cells run on: a launcher, the channel the ranks dial, and what the kernel learnt about them.

One run path for every cell (``driver.execute``); what differs is how long the ranks live. A one-shot set
lives for one cell: its ranks exit after it, and its channel closes. A kept set (``keep=True``) stays up
after the cell: later cells are sent to the ranks already up, in their own namespace, until ``close``.
"""
from __future__ import annotations

import queue
import secrets
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ...core import contract as C
from ...core.travel import local_versions
from ...channel.server import ChannelServer
from ...core.contract import CodeShip, Inbound, LaunchInfo, RunPlan
from ...core.errors import RankFailure
from ...data.service import DataService
from ...launchers import launcher_for
from ...launchers.base import Launcher
from ...core.options import RunOptions
from ...views import RunView
from ..code_ship import blob, ship_code
from ..kept.supervisor import KeptSupervisor
from ..pickling import Packed
from ..state.run import RunState
from .supervisor import SILENCE_S, Supervisor

__all__ = ["RankSet", "KeptInfo"]

_FRAME_SLACK = 8 << 20  # a frame carries a value plus its message: room above --max-value-mb
JOB_END_S = 60.0        # a run whose every rank returned: its job has this long to end by itself (_see_job_end)
_BROKEN_BETWEEN = {(C.AGENT, C.EXIT), (C.BACKEND, C.LOST), (C.BACKEND, C.JOB_END), (C.RANK, C.DISCONNECTED)}


@dataclass(frozen=True)
class KeptInfo:
    """What ``jupyter_torchdist.kept()`` says about the notebook's kept ranks."""

    n: int
    backend: str                               # in words ("spark local[256] (embedded)")
    gpu: bool
    local: bool
    hosts: dict[int, tuple[str, int | None]]  # rank -> (host, pid)
    since: float                               # when they started (time.time())
    cells: int                                 # cells run so far
    backend_name: str = ""                     # the registry's name ("spark", "local")
    holds: str | None = None                   # what the ranks hold while kept ("Spark task slots"), if anything
    failed_rank: int | None = None             # the root cause's rank of the last cell, when it failed (for
    #                                            %distribute_debug: that rank keeps the failure's frames)
    stand_in: bool = False                     # local processes standing in for the embedded session (it was
    #                                            starting, or no Java): later cells stay on them


@dataclass(frozen=True)
class Hooks:
    """What a run hands its ranks when it starts them (``driver.RunDriver.start_ranks``)."""

    checkpoint: str | None = None    # where jt.commit writes (--max-restarts, --checkpoint-dir)
    attempt: int = 1                 # which start of the run these ranks are
    number: int | None = None        # the run's number in this kernel (jupyter_torchdist.runs())
    durable_id: str | None = None    # the run's durable id (run.id): its view and report say it
    carried: tuple[str, ...] = ()    # notes from the attempts before this one, for its view
    tap: Callable[[Inbound], None] | None = None       # the run's recorder sees its ranks' messages (--track)
    listener: Callable[[Inbound], None] | None = None  # a sweep's judge sees its ranks' reports
    folder: str | None = None        # the run's folder under --logdir (--track tensorboard, --profile)


class RankSet:
    """Ranks for one cell (one-shot) or for many (``keep``), started by ``launcher`` (prepared: ``info``)."""

    def __init__(self, options: RunOptions, launcher: Launcher, info: LaunchInfo, hooks: Hooks = Hooks(), *,
                 keep: bool = False) -> None:
        self.options, self.keep, self.hooks = options, keep, hooks
        self.launcher, self.info = launcher, info
        self.inbox: queue.SimpleQueue[Inbound] = queue.SimpleQueue()
        self.server = ChannelServer(options.n, host=self.info.channel_host, inbox=self.inbox,
                                    max_frame=options.max_value_bytes + _FRAME_SLACK, tls=self.info.channel_tls,
                                    watcher=self.info.watcher, lost_hint=self.info.lost_hint, files=blob)
        self.run_id = secrets.token_hex(6)
        self.cells, self.since, self.closed = 0, time.time(), False
        self.hosts: dict[int, tuple[str, int | None]] = {}
        self.heard: dict[int, float] = {}  # kept ranks: when each last said anything (usage readings go on)
        self.rank_names: set[str] = set()  # global names the ranks' own code defined (kept ranks)
        self.failed_rank: int | None = None  # the last cell's root-cause rank, if it raised (kept ranks)
        self.number: int | None = hooks.number  # the run (cell) now on these ranks (kept ranks: each cell's own)
        self.durable_id: str | None = hooks.durable_id   # ... and its durable id
        self.code: CodeShip | None = None    # the notebook's code as the last cell sent it (kernel/code_ship.py)

    # -- one cell ----------------------------------------------------------------------------------------
    @classmethod
    def prepared(cls, options: RunOptions, *, keep: bool = False) -> RankSet:
        """A set on the launcher of the backend that takes ``options``, prepared, with no hooks."""
        launcher = launcher_for(options)
        return cls(options, launcher, launcher.prepare(options), keep=keep)

    def new_state(self, options: RunOptions, title: str) -> RunState:
        cell = self.cells + 1
        state = RunState(options.n, title=title, options=options.summary(), backend=self.info.label,
                         started_at=time.time(), cell=cell if self.keep else None, run_id=self.number,
                         durable_id=self.durable_id, background=options.background)
        state.folder = self.hooks.folder
        state.notes.extend(self.hooks.carried)
        state.debug.stall_after = options.stall_after or None
        if self.keep and self.launcher.slot_noun:
            state.notes.append(f"kept ranks hold {options.n} {self.launcher.slot_noun} until %distribute_stop "
                               "(or ranks.stop())")
        if cell > 1:
            state.begin_cell(cell, self.hosts, state.started_at, self.heard)
        elif self.info.start_bound_s is not None:
            state.start_by, state.start_hint = state.started_at + self.info.start_bound_s, self.info.start_hint
        return state

    def supervisor(self, state: RunState, view: RunView, options: RunOptions) -> Supervisor:
        deadline = None if options.timeout is None else state.started_at + options.timeout
        sup = (KeptSupervisor if self.keep else Supervisor)(state, self.server, self.launcher, view, self.inbox,
                                                            deadline, tap=self.hooks.tap, listener=self.hooks.listener)
        in_slots = 0 if self.keep or not self.launcher.slot_noun else options.n  # kept ranks' slots count as held
        sup.data = DataService(self.server, self.inbox, world_size=options.n, workers=options.data_workers,
                               secret=self.server.secret, run_id=f"{self.run_id}-{self.cells + 1}",
                               ranks_in_slots=in_slots, loopback=self.info.loopback)
        return sup

    def begin(self, payload: Packed, options: RunOptions, filename: str, source: str) -> None:
        """Start the ranks with the first cell, or send the next cell to the ranks already up."""
        self.code = ship_code(payload.modules, options, travels=not self.info.loopback)
        if self.cells == 0:
            self.launcher.start(self._plan(payload, filename, source, options), self.inbox)
            return
        msg: C.CellMsg = {"t": C.CELL, "cell": self.cells + 1, "payload": payload.data, "filename": filename,
                          "source": source, "all_ranks": options.all_ranks, "max_value_bytes": options.max_value_bytes,
                          "post_mortem": options.pdb, "code": self.code}
        for rank in range(self.options.n):
            self.server.send(rank, C.RANK, msg)

    def _address(self) -> tuple[str, int]:
        """Where the ranks dial: where the channel listens, unless the launcher advertises another address."""
        if self.info.advertise is None:
            return self.server.address
        host, port = self.info.advertise
        return host, port if port is not None else self.server.address[1]

    def _plan(self, payload: Packed, filename: str, source: str, options: RunOptions) -> RunPlan:
        return RunPlan(run_id=self.run_id, world_size=options.n, address=self._address(),
                       secret=self.server.secret, payload=payload.data, code=self.code, inline=self._inline(),
                       filename=filename,
                       source=source,
                       gpu=options.gpu, threads=options.backend_threads, max_value_bytes=options.max_value_bytes,
                       all_ranks=options.all_ranks, loopback=self.info.loopback, tls=self.server.tls_pin,
                       keep=self.keep, versions=tuple(local_versions(options.packages).items()),
                       argv=tuple(sys.argv), checkpoint=self.hooks.checkpoint,
                       attempt=self.hooks.attempt, post_mortem=options.pdb, every_point=bool(options.track),
                       profile=options.profile, per_node=self.info.ranks_per_task if options.task_nodes else 0)

    def _inline(self) -> tuple[tuple[str, bytes], ...]:
        """The notebook's code in the plan itself, where the ranks cannot fetch it (an offline Spark Connect run)."""
        if not self.info.inline_code or self.code is None:
            return ()
        return tuple((d, data) for d in self.code.digests() if (data := blob(d)) is not None)

    def after_cell(self, state: RunState, sup: Supervisor) -> None:
        """Learn what the cell told about the ranks; a kept set the cell broke is closed here."""
        self.cells += 1
        self.hosts = {r.rank: (r.where, r.pid) for r in state.ranks}
        self.heard = {r.rank: r.last_word for r in state.ranks if r.last_word is not None}
        if sup.names is not None:
            self.rank_names = set(sup.names)
        self.failed_rank = _raised_first(state)
        if sup.broken is not None:
            self.close(wait_s=0.0 if state.job_ended_at is not None else 10.0)

    def end_cell(self, job_ended: bool = True) -> None:
        """The cell is over: a one-shot set's channel closes (its ranks have exited; when every rank returned, its
        launcher's job may not have ended yet: ``job_ended`` False); a kept set stays up."""
        if not self.keep and not self.closed:
            self.server.close()
            self.closed = True
            if not job_ended:
                threading.Thread(target=_see_job_end, args=(self.inbox, self.launcher), name="jtd-job-end",
                                 daemon=True).start()

    # -- between cells and at the end ----------------------------------------------------------------------
    def lost_between_cells(self) -> RankFailure | None:
        """Drain what came since the last cell; how the set broke meanwhile (the first rank lost), or None."""
        lost = None
        while True:
            try:
                ev = self.inbox.get_nowait()
            except queue.Empty:
                return lost or self._silent_since_last_cell(time.time())
            if ev.role != C.BACKEND and ev.rank in self.heard:
                self.heard[ev.rank] = max(self.heard[ev.rank], ev.at)
            if (ev.role, ev.msg.get("t")) in _BROKEN_BETWEEN and lost is None:
                lost = self._ended_between_cells(ev)

    def _ended_between_cells(self, ev: Inbound) -> RankFailure:
        rank, msg = max(ev.rank, 0), ev.msg
        where, signal = self.hosts.get(rank, ("", None))[0], msg.get("signal")
        what = msg.get("summary") or signal or msg.get("code") or msg.get("t")
        if ev.rank < 0:
            return RankFailure(rank, where, "lost", "the launcher's job ended between cells", "", ev.at)
        return RankFailure(rank, where, "exit" if msg.get("t") == C.EXIT else "lost", f"ended between cells ({what})",
                           "", ev.at, signal=signal if isinstance(signal, str) else None)

    def _silent_since_last_cell(self, now: float) -> RankFailure | None:
        """A kept rank whose heartbeat stopped between cells: its host, link or executor is gone."""
        for rank, at in sorted(self.heard.items()):
            if now - at >= SILENCE_S:
                where = self.hosts.get(rank, ("", None))[0]
                return RankFailure(rank, where, "lost", f"lost: no word from it for {now - at:.0f} s (its host or its "
                                   "link went away, its executor was killed, or its process is frozen)", "", now)
        return None

    def close(self, wait_s: float = 10.0) -> None:
        """Kill every rank, end the launcher's job, close the channel; waits up to ``wait_s`` for the job."""
        if self.closed:
            return
        self.closed = True
        self.server.stop_all("the kept ranks were stopped" if self.keep else "the run was stopped")
        if wait_s <= 0:
            self.launcher.cancel()
        deadline, cancelled = time.time() + wait_s, wait_s <= 0
        while time.time() < deadline:
            try:
                ev = self.inbox.get(timeout=0.1)
            except queue.Empty:
                ev = None
            if ev is not None and ev.rank < 0 and ev.msg.get("t") == C.JOB_END:
                break
            if not cancelled and time.time() > deadline - wait_s + 2.0:
                self.launcher.cancel()  # agents had 2 s to stop their ranks themselves
                cancelled = True
        self.server.close()

    def describe(self) -> KeptInfo:
        return KeptInfo(n=self.options.n, backend=self.info.label, gpu=self.options.gpu,
                        local=self.launcher.name == "local", hosts=dict(self.hosts), since=self.since,
                        cells=self.cells, backend_name=self.launcher.name, holds=self.launcher.slot_noun,
                        failed_rank=self.failed_rank, stand_in=getattr(self.launcher, "stands_in", None) is not None)


def _raised_first(state: RunState) -> int | None:
    """The rank whose own exception failed the cell (its frames are what a post-mortem looks at), if any."""
    primary = [f for f in state.failures.values() if f.kind == "exception" and not f.secondary]
    return min(primary, key=lambda f: (f.at, f.rank)).rank if primary else None


def _see_job_end(inbox: queue.SimpleQueue[Inbound], launcher: Launcher) -> None:
    """After a run whose every rank returned and exited: its launcher's job ends by itself within moments (the agents
    exit, and with them the Spark tasks); if it has not within ``JOB_END_S``, it is cancelled."""
    deadline = time.monotonic() + JOB_END_S
    while (left := deadline - time.monotonic()) > 0:
        try:
            ev = inbox.get(timeout=left)
        except queue.Empty:
            break
        if ev.rank < 0 and ev.msg.get("t") == C.JOB_END:
            return
    launcher.cancel()
