"""One cell on kept ranks, from first frame to the value or the error that says whether the ranks survived."""
from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from .. import contract as C
from ..contract import Inbound
from ..errors import RunError
from ..options import RunOptions
from ..views import RunView
from .kept_supervisor import KeptSupervisor
from .result import RunResult
from .state import RunState
from .supervisor import plain_sigint

if TYPE_CHECKING:
    from .kept import Ranks, _KeptSet

__all__ = ["run_kept_cell"]

SURVIVED = ("The kept ranks survived: every rank is back waiting for the next cell, with its state as this cell "
            "left it.")
STOPPED = "The kept ranks were stopped ({why}): their state (models, optimizers, variables) is gone. The next " \
          "--keep cell starts new ones."


class _NamesSupervisor(KeptSupervisor):
    """Also remembers rank 0's list of the names its own code defined."""

    names: list[str] | None = None

    def handle(self, ev: Inbound) -> None:
        if ev.rank == 0 and ev.role == C.RANK and ev.msg.get("t") == C.RESULT and ev.msg.get("cell") == self.state.cell:
            names = ev.msg.get("names")
            self.names = [str(n) for n in names] if isinstance(names, list) else None
        super().handle(ev)


def _state(kept: _KeptSet, options: RunOptions, title: str, cell: int) -> RunState:
    state = RunState(options.n, title=title, options=options.summary(), backend=kept.info.label,
                     started_at=time.time(), cell=cell)
    if not options.local:
        state.notes.append(f"kept ranks hold {options.n} Spark task slots until %distribute_stop (or ranks.stop())")
    if cell > 1:
        state.begin_cell(cell, kept.hosts, state.started_at)
    return state


def _learn(kept: _KeptSet, state: RunState, sup: _NamesSupervisor) -> None:
    kept.cells = state.cell or kept.cells
    kept.hosts = {r.rank: (r.host, r.pid) for r in state.ranks}
    if sup.names is not None:
        kept.rank_names = set(sup.names)


def _start_or_send(kept: _KeptSet, cell: int, payload: bytes, options: RunOptions, filename: str,
                   source: str) -> None:
    if cell == 1:
        kept.launcher.start(kept.plan(payload, filename, source, options), kept.inbox)
    else:
        kept.send_cell(cell, payload, filename, source, options)


def _supervise(kept: _KeptSet, state: RunState, view: RunView, options: RunOptions) -> _NamesSupervisor:
    from .run import data_service

    deadline = None if options.timeout is None else state.started_at + options.timeout
    sup = _NamesSupervisor(state, kept.server, kept.launcher, view, kept.inbox, deadline)
    sup.data = data_service(options, kept.server, kept.inbox, f"{kept.run_id}-{state.cell}", kept=True,
                            loopback=kept.info.loopback)
    return sup


def _lost_before(ranks: Ranks, kept: _KeptSet) -> None:
    why = kept.lost_between_cells() if kept.cells else None
    if why is not None:
        ranks._forget()
        kept.stop()
        raise RunError(f"the kept ranks were lost: {why}. Their state is gone; run the cell again to start new "
                       "kept ranks.", world_size=kept.options.n)


def run_kept_cell(ranks: Ranks, kept: _KeptSet, payload: bytes, options: RunOptions, view: RunView, title: str,
                  filename: str, source: str) -> RunResult:
    """Run the next cell on ``kept``; the value, or the cell's error saying whether the ranks survived."""
    _lost_before(ranks, kept)
    for warning in kept.info.warnings if kept.cells == 0 else ():
        print(f"jupyter-torchdist warning: {warning}", file=sys.stderr)
    state = _state(kept, options, title, kept.cells + 1)
    sup = _supervise(kept, state, view, options)
    result = RunResult(value=None, values=sup.values, state=state)
    try:
        view.start(dict(state.snapshot(log_tail=view.log_tail)))
        _start_or_send(kept, state.cell or 1, payload, options, filename, source)
        with plain_sigint():
            sup.run_until_done()
        _learn(kept, state, sup)
        error = _conclude(ranks, kept, state, sup, options)
    except BaseException as exc:
        ranks._forget()
        kept.stop()
        state.abort(time.time(), f"{type(exc).__name__}: {exc}")
        raise
    finally:
        sup.data.close()
        result.logs = {r.rank: list(r.logs) for r in state.ranks}
        view.finish(dict(state.snapshot(log_tail=view.log_tail)))
    if error is not None:
        error.result = result
        raise error
    result.value = [sup.values.get(r) for r in range(options.n)] if options.all_ranks else sup.values.get(0)
    return result


def _conclude(ranks: Ranks, kept: _KeptSet, state: RunState, sup: KeptSupervisor,
              options: RunOptions) -> RunError | None:
    if sup.broken is not None:
        ranks._forget()
        kept.stop(wait_s=0.0 if state.job_ended_at is not None else 10.0)
        state.close_out(time.time())
    error = state.conclude(time.time(), timeout=options.timeout, value_needed=not options.all_ranks)
    if sup.broken is not None:
        line = STOPPED.format(why=sup.broken)
        error = error or RunError(f"the kept ranks were lost: {sup.broken}", world_size=options.n)
        state.notes.append(line)
        error.extra.append(line)
    elif error is not None:
        state.notes.append(SURVIVED)
        error.extra.append(SURVIVED)
    return error


