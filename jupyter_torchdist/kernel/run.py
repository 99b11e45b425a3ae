"""The one run path: the magic, ``run``, ``TorchDistributor`` and the command line all come through here.

``launch`` packs the work, picks the launcher, opens the run's channel, supervises the run and
keeps the result for ``last_run()``; it returns the result or raises the run's error with the
result on it (``exc.result``), so logs and state of a failed run stay reachable.
"""
from __future__ import annotations

import queue
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..channel.server import ChannelServer
from ..contract import Inbound, LaunchInfo, RunPlan
from ..data.service import DataService
from ..errors import DistributeError
from ..launchers import get_launcher
from ..launchers.base import Launcher
from ..options import RunOptions
from ..views import NullView, RunView
from .pickling import pack
from .result import RunResult
from .state import RunState
from .supervisor import Supervisor, plain_sigint

__all__ = ["Work", "launch", "execute", "last_run", "data_service"]

_FRAME_SLACK = 8 << 20  # a frame carries a value plus its message: room above --max-value-mb
_last: RunResult | None = None


@dataclass(frozen=True)
class Work:
    """What to run on every rank: a function and its arguments, and where its source lines come from."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    title: str = ""
    filename: str = "<distributed>"
    source: str = ""


def last_run() -> RunResult | None:
    """The last run's result in this process (state, every rank's logs), failed runs included."""
    return _last


def launch(work: Work, options: RunOptions, view: RunView | None = None) -> RunResult:
    """Run ``work`` as ``options.n`` ranks and return the result, or raise the run's error."""
    global _last
    payload = pack(work.fn, work.args, work.kwargs, max_bytes=options.max_payload_bytes)
    try:
        result = execute(payload, options, get_launcher(options.local), view or NullView(),
                         filename=work.filename, source=work.source, title=work.title)
    except DistributeError as exc:
        _last = exc.result or _last
        raise
    _last = result
    return result


def _plan(options: RunOptions, info: LaunchInfo, server: ChannelServer, payload: bytes,
          filename: str, source: str) -> RunPlan:
    return RunPlan(run_id=secrets.token_hex(6), world_size=options.n, address=server.address,
                   secret=server.secret, payload=payload, filename=filename, source=source, gpu=options.gpu,
                   threads=options.backend_threads, max_value_bytes=options.max_value_bytes,
                   all_ranks=options.all_ranks, loopback=info.loopback, tls=server.tls_pin)


def data_service(options: RunOptions, server: ChannelServer, inbox: queue.SimpleQueue[Inbound], run_id: str, *,
                 kept: bool, loopback: bool) -> DataService:
    """The run's answer to batches() (idle unless a rank asks)."""
    return DataService(server, inbox, world_size=options.n, workers=options.data_workers, secret=server.secret,
                       run_id=run_id, ranks_in_slots=0 if options.local or kept else options.n, loopback=loopback)


def _values(options: RunOptions, values: dict[int, Any]) -> Any:
    return [values.get(r) for r in range(options.n)] if options.all_ranks else values.get(0)


def execute(payload: bytes, options: RunOptions, launcher: Launcher, view: RunView, *,
            filename: str = "<distributed>", source: str = "", title: str = "") -> RunResult:
    """Run an already packed payload (``pickling.pack``) with ``launcher``; return the result or raise."""
    info = launcher.prepare(options)
    for warning in info.warnings:
        print(f"jupyter-torchdist warning: {warning}", file=sys.stderr)
    state = RunState(options.n, title=title, options=options.summary(), backend=info.label, started_at=time.time())
    inbox: queue.SimpleQueue[Inbound] = queue.SimpleQueue()
    server = ChannelServer(options.n, host=info.channel_host, max_frame=options.max_value_bytes + _FRAME_SLACK,
                           inbox=inbox, tls=info.channel_tls, watcher=info.watcher, lost_hint=info.lost_hint)
    deadline = None if options.timeout is None else state.started_at + options.timeout
    plan = _plan(options, info, server, payload, filename, source)
    sup = Supervisor(state, server, launcher, view, inbox, deadline)
    sup.data = data_service(options, server, inbox, plan.run_id, kept=False, loopback=info.loopback)
    result = RunResult(value=None, values=sup.values, state=state)
    try:
        view.start(dict(state.snapshot(log_tail=view.log_tail)))
        launcher.start(plan, inbox)
        with plain_sigint():
            sup.run_until_done()
        state.close_out(time.time())
        error = state.conclude(time.time(), timeout=options.timeout, value_needed=not options.all_ranks)
    except BaseException as exc:  # the launcher broke, or an interrupt came before the loop began
        sup.cancel()
        state.abort(time.time(), f"{type(exc).__name__}: {exc}")
        if isinstance(exc, DistributeError):
            exc.result = result
        raise
    finally:
        sup.data.close()
        server.close()
        result.logs = {r.rank: list(r.logs) for r in state.ranks}
        view.finish(dict(state.snapshot(log_tail=view.log_tail)))
    if error is not None:
        error.result = result
        raise error
    result.value = _values(options, sup.values)
    return result
