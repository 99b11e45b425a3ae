"""Kept ranks: start N ranks once, run cell after cell on them with their state kept, stop them when asked.

``Ranks`` is the API (``with jt.Ranks(n=2) as ranks: ranks.run(fn)``); the magic's ``--keep`` holds one
for the notebook (``notebook_ranks``). The ranks, their process group and their channel stay up between
cells; each cell has its own state, view and result, supervised by ``KeptSupervisor`` (which decides
whether the ranks survive a failure or an interrupt). Nothing outlives the kernel: ``atexit`` stops every
set, and a kernel that dies takes them with it (their agents kill them when the channel closes).
"""
from __future__ import annotations

import atexit
import queue
import secrets
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from .. import contract as C
from ..channel.server import ChannelServer
from ..contract import Inbound, LaunchInfo, RunPlan
from ..launchers import get_launcher
from ..launchers.base import Launcher
from ..options import RunOptions
from ..views import NullView, RunView
from .pickling import pack
from .result import RunResult

__all__ = ["Ranks", "KeptInfo", "notebook_ranks", "set_notebook_ranks"]

_FRAME_SLACK = 8 << 20
_BROKEN_BETWEEN = {(C.AGENT, C.EXIT), (C.BACKEND, C.LOST), (C.BACKEND, C.JOB_END), (C.RANK, C.DISCONNECTED)}


@dataclass(frozen=True)
class KeptInfo:
    """What ``jupyter_torchdist.kept()`` says about the notebook's kept ranks."""

    n: int
    backend: str
    gpu: bool
    local: bool
    hosts: dict[int, tuple[str, int | None]]  # rank -> (host, pid)
    since: float                               # when they started (time.time())
    cells: int                                 # cells run so far


class _KeptSet:
    """The live part: launcher, channel and what the kernel learnt about the ranks."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.launcher: Launcher = get_launcher(options.local)
        self.info: LaunchInfo = self.launcher.prepare(options)
        self.inbox: queue.SimpleQueue[Inbound] = queue.SimpleQueue()
        self.server = ChannelServer(options.n, host=self.info.channel_host, inbox=self.inbox,
                                    max_frame=options.max_value_bytes + _FRAME_SLACK, tls=self.info.channel_tls,
                                    watcher=self.info.watcher, lost_hint=self.info.lost_hint)
        self.run_id = secrets.token_hex(6)
        self.cells, self.since = 0, time.time()
        self.hosts: dict[int, tuple[str, int | None]] = {}
        self.rank_names: set[str] = set()

    def plan(self, payload: bytes, filename: str, source: str, options: RunOptions) -> RunPlan:
        return RunPlan(run_id=self.run_id, world_size=options.n, address=self.server.address,
                       secret=self.server.secret, payload=payload, filename=filename, source=source,
                       gpu=options.gpu, threads=options.backend_threads, max_value_bytes=options.max_value_bytes,
                       all_ranks=options.all_ranks, loopback=self.info.loopback, tls=self.server.tls_pin, keep=True)

    def send_cell(self, cell: int, payload: bytes, filename: str, source: str, options: RunOptions) -> None:
        msg: C.CellMsg = {"t": C.CELL, "cell": cell, "payload": payload, "filename": filename, "source": source,
               "all_ranks": options.all_ranks, "max_value_bytes": options.max_value_bytes}
        for rank in range(self.options.n):
            self.server.send(rank, C.RANK, msg)

    def lost_between_cells(self) -> str | None:
        """Drain what came since the last cell; why the set broke meanwhile, or None."""
        why = None
        while True:
            try:
                ev = self.inbox.get_nowait()
            except queue.Empty:
                return why
            if (ev.role, ev.msg.get("t")) in _BROKEN_BETWEEN and why is None:
                what = ev.msg.get("summary") or ev.msg.get("signal") or ev.msg.get("code") or ev.msg.get("t")
                why = f"rank {ev.rank} ended between cells ({what})" if ev.rank >= 0 else "the launcher's job ended"

    def stop(self, wait_s: float = 10.0) -> None:
        """Kill every rank, end the launcher's job, close the channel; waits up to ``wait_s`` for the job."""
        self.server.stop_all("the kept ranks were stopped")
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


_live: weakref.WeakSet[Ranks] = weakref.WeakSet()


class Ranks:
    """N ranks kept alive across calls: what one call builds (a model, an optimizer) is there in the next.

    ``run(fn, *args, **kwargs)`` calls a function on every rank; ``run_cell(source)`` runs notebook-style
    code in the ranks' own namespace. Both return rank 0's value (every rank's with ``all_ranks=True``).
    The ranks start on the first call and stay until ``stop()`` (or the process ends).
    """

    def __init__(self, n: int = 2, *, gpu: bool = False, local: bool = False, threads: int | None = None,
                 timeout: float | None = None, all_ranks: bool = False, data_workers: int | None = None) -> None:
        self.options = RunOptions(n=n, gpu=gpu, local=local, backend_threads=threads, timeout=timeout,
                                  all_ranks=all_ranks, keep=True, data_workers=data_workers)
        self._set: _KeptSet | None = None
        _live.add(self)

    def __enter__(self) -> Ranks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def alive(self) -> bool:
        return self._set is not None

    @property
    def rank_names(self) -> set[str]:
        """Global names the ranks' own code has defined (they win over notebook values)."""
        return set(self._set.rank_names) if self._set is not None else set()

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``fn(*args, **kwargs)`` on every rank; rank 0's value (or every rank's)."""
        payload = pack(fn, args, kwargs, max_bytes=self.options.max_payload_bytes)
        return self.execute(payload, self.options, title=f"run({getattr(fn, '__name__', 'fn')}) on kept ranks").value

    def run_cell(self, source: str, namespace: dict[str, Any] | None = None) -> Any:
        """Run ``source`` like a notebook cell on every rank (names it assigns stay on the ranks).

        Names it reads that the ranks do not define come from ``namespace`` (shipped by value)."""
        from .kept_cell import kept_cell

        filename = f"<kept-cell-{self._set.cells + 1 if self._set else 1}>"
        cell = kept_cell(source, filename, namespace or {}, self.rank_names)
        payload = pack(cell, max_bytes=self.options.max_payload_bytes, named=cell.shipped)
        return self.execute(payload, self.options, title="run_cell on kept ranks", filename=filename,
                            source="\n" + source).value

    def stop(self) -> bool:
        """Stop the ranks (every process gone, their slots free). False if none were up."""
        kept, self._set = self._set, None
        if kept is None:
            return False
        kept.stop()
        return True

    def describe(self) -> KeptInfo | None:
        k = self._set
        if k is None:
            return None
        return KeptInfo(n=k.options.n, backend=k.info.label, gpu=k.options.gpu, local=k.options.local,
                        hosts=dict(k.hosts), since=k.since, cells=k.cells)

    def execute(self, payload: bytes, options: RunOptions, *, title: str, view: RunView | None = None,
                filename: str = "<distributed>", source: str = "") -> RunResult:
        """Run one packed payload as the next cell (starting the ranks first if none are up)."""
        from .kept_run import run_kept_cell

        if self._set is None:
            self._set = _KeptSet(replace(options, keep=True))
        return run_kept_cell(self, self._set, payload, options, view or NullView(), title, filename, source)

    def _forget(self) -> None:
        """The set broke during a cell and was stopped there."""
        self._set = None


_notebook: Ranks | None = None


def notebook_ranks() -> Ranks | None:
    """The notebook's kept ranks (the magic's ``--keep``), if any are up."""
    return _notebook if _notebook is not None and _notebook.alive else None


def set_notebook_ranks(ranks: Ranks | None) -> None:
    global _notebook
    _notebook = ranks


@atexit.register
def _stop_all() -> None:
    """Nothing outlives the kernel: a kernel that exits stops every kept set first."""
    for ranks in list(_live):
        try:
            ranks.stop()
        except Exception:
            pass

