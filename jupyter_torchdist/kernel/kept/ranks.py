"""Kept ranks: start N ranks once, run cell after cell on them with their state kept, stop them when asked.

``Ranks`` is the API (``with jt.Ranks(n=2) as ranks: ranks.run(fn)``); the magic's ``--keep`` holds one
for the notebook (``notebook_ranks``). The ranks, their process group and their channel stay up between
cells; each cell has its own state, view and result, supervised by ``KeptSupervisor`` (which decides
whether the ranks survive a failure or an interrupt). Nothing outlives the kernel: ``atexit`` stops every
set, and a kernel that dies takes them with it (their agents kill them when the channel closes).
"""
from __future__ import annotations

import atexit
import itertools
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ...core.errors import RunFailed, RunInterrupted
from ...core.options import RunOptions
from ...views import NullView, RunView
from ..cell import kept_cell
from ..pickling import Packed, pack
from ...launchers import launcher_for
from ..runs.rankset import Hooks, KeptInfo, RankSet
from ..runs.restarts import CheckpointFolder, restartable
from ..runs.run import RunResult
from ..runs.driver import Pool, execute
from ..runs.run import Run
from ..runs.turns import Ticket, turns

__all__ = ["Ranks", "KeptInfo", "KeptCell", "notebook_ranks", "set_notebook_ranks"]


_live: weakref.WeakSet[Ranks] = weakref.WeakSet()
_numbers = itertools.count(1)


@dataclass(frozen=True)
class KeptCell:
    """A call on kept ranks (the one that starts a set is run again when the set restarts)."""

    payload: Packed
    options: RunOptions
    title: str
    filename: str
    source: str


class Ranks:
    """N ranks kept alive across calls: what one call builds (a model, an optimizer) is there in the next.

    ``run(fn, *args, **kwargs)`` calls a function on every rank; ``run_cell(source)`` runs notebook-style
    code in the ranks' own namespace. Both return rank 0's value (every rank's with ``all_ranks=True``).
    The ranks start on the first call and stay until ``stop()`` (or the process ends).
    """

    def __init__(self, n: int = 2, *, gpu: bool = False, local: bool = False, threads: int | None = None,
                 timeout: float | None = None, all_ranks: bool = False, data_workers: int | None = None,
                 max_restarts: int = 0, checkpoint_dir: str | None = None) -> None:
        self.options = RunOptions(n=n, gpu=gpu, local=local, backend_threads=threads, timeout=timeout,
                                  all_ranks=all_ranks, keep=True, data_workers=data_workers,
                                  max_restarts=max_restarts, checkpoint_dir=checkpoint_dir)
        self._set: RankSet | None = None
        self._first: KeptCell | None = None              # the call that started the set (run again on a restart)
        self._folder: CheckpointFolder | None = None   # where jt.commit writes, for the set's whole life
        self._restarts = 0
        self._lost: RunFailed | None = None            # the set broke in a way a restart mends: at the next call
        self.turn_pool = f"kept ranks {next(_numbers)}"  # one cell at a time runs on them (slots.turns)
        self._retired = False  # %distribute_stop: stopped for good, with the cells in line for them
        _live.add(self)

    @classmethod
    def for_options(cls, options: RunOptions) -> Ranks:
        """Kept ranks for what a cell asked for (the magic's ``--keep``)."""
        ranks = cls(options.n)
        ranks.options = replace(options, keep=True)
        return ranks

    def __enter__(self) -> Ranks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def _up(self) -> RankSet | None:
        """The kept set, unless a cell broke it (it closed itself then)."""
        return self._set if self._set is not None and not self._set.closed else None

    @property
    def alive(self) -> bool:
        """Up, lost and to be restarted at the next call (``max_restarts``), or not up yet with cells in line for them
        (a background cell that starts them does so on its own thread: the cells after it wait for these ranks,
        they do not start others)."""
        return self._up is not None or self._lost is not None or bool(self.busy())

    @property
    def rank_names(self) -> set[str]:
        """Global names the ranks' own code has defined (they win over notebook values)."""
        up = self._up
        return set(up.rank_names) if up is not None else set()

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``fn(*args, **kwargs)`` on every rank; rank 0's value (or every rank's)."""
        payload = pack(fn, args, kwargs, max_bytes=self.options.max_payload_bytes)
        return self.execute(payload, self.options, title=f"run({getattr(fn, '__name__', 'fn')}) on kept ranks").value

    def run_cell(self, source: str, namespace: dict[str, Any] | None = None) -> Any:
        """Run ``source`` like a notebook cell on every rank (names it assigns stay on the ranks).

        Names it reads that the ranks do not define come from ``namespace`` (shipped by value)."""
        up = self._up
        filename = f"<kept-cell-{up.cells + 1 if up else 1}>"
        cell = kept_cell(source, filename, namespace or {}, self.rank_names)
        payload = pack(cell, max_bytes=self.options.max_payload_bytes, named=cell.shipped)
        return self.execute(payload, self.options, title="run_cell on kept ranks", filename=filename,
                            source="\n" + source).value

    def stop(self) -> bool:
        """Stop the ranks (every process gone, their slots free). False if none were up."""
        kept, self._set, lost, self._lost = self._up, None, self._lost, None
        if self._folder is not None:
            self._folder.remove()
            self._folder = None
        if kept is None:
            return lost is not None
        kept.close()
        return True

    def retire(self) -> list[int]:
        """``%distribute_stop``: stop the ranks and every cell running or in line for them, and start none again (a
        background cell still queued, or still starting them on its thread, must not bring them back up after the
        stop). Returns the numbers of the cells stopped."""
        from ..runs.history import find

        self._retired = True
        cells = self.busy()
        for number in cells:
            run = find(number)
            if run is not None:
                run.stop("%distribute_stop")
        self.stop()
        return cells

    def _refuse_if_retired(self) -> None:
        if self._retired:
            raise RunInterrupted("stopped by %distribute_stop before this cell started on the kept ranks: run it again "
                                 "to start new ones")

    def turn(self, run: Run) -> Pool:
        """``run``'s turn on these ranks: cells run one at a time, in the order they came, never interleaved."""
        return Pool(Ticket(run.number, 1, self.turn_pool, what="turn"), lambda: 1)

    def busy(self) -> list[int]:
        """The runs (cells) running on these ranks or waiting for them, by number."""
        return turns.numbers(self.turn_pool)

    def describe(self) -> KeptInfo | None:
        up = self._up
        return up.describe() if up is not None else None

    def execute(self, payload: Packed, options: RunOptions, *, title: str, view: RunView | None = None,
                filename: str = "<distributed>", source: str = "", run: Run | None = None) -> RunResult:
        """Run one packed payload as the next cell (starting the ranks first if none are up, or again if they were
        lost and ``max_restarts`` allows). ``run``: the cell's handle (its stop interrupts this cell only)."""
        ranks = self.ready(KeptCell(payload, options, title, filename, source), run)
        return self.cell(ranks, payload, options, title=title, view=view, filename=filename, source=source)

    def ready(self, first: KeptCell, run: Run | None = None) -> RankSet:
        """The set the next cell runs on: the one up, unless it was lost (then restarted, if allowed), or a new one
        (``first``: the call that starts it, run again if it restarts). ``run``: the cell's handle, attached."""
        ranks = self._up
        if ranks is not None and ranks.cells:
            ranks = self._unless_lost(ranks)
        if ranks is None and self._lost is not None:
            ranks = self._restart(quiet=first.options.background)
        if ranks is None:
            self._refuse_if_retired()
            ranks = self._start(first)
            if self._retired:  # retired while these started: ``retire`` may have looked before they were there
                ranks.close()
                self._refuse_if_retired()
        if run is not None:
            ranks.number, run.where, run.ui_url = run.number, ranks.info.label, ranks.info.ui_url  # this cell's run
            ranks.durable_id = run.id
            run.attach(ranks.inbox)
        return ranks

    def cell(self, ranks: RankSet, payload: Packed, options: RunOptions, *, title: str,
             view: RunView | None = None, filename: str = "<distributed>", source: str = "") -> RunResult:
        """One cell on ``ready``'s set; a failure that broke it is remembered for a restart at the next cell."""
        try:
            return execute(payload, options, ranks, view or NullView(), filename=filename, source=source, title=title)
        except RunFailed as exc:
            self._after(exc, ranks)
            raise

    def _start(self, first: KeptCell) -> RankSet:
        options = replace(self.options, keep=True)
        launcher = launcher_for(options)
        info = launcher.prepare(options)
        if self._folder is None:
            self._folder = CheckpointFolder.for_run(self.options, info.loopback)
        hooks = Hooks(checkpoint=self._folder.where, attempt=self._restarts + 1)
        ranks = self._set = RankSet(options, launcher, info, hooks, keep=True)
        self._first = self._first or first
        return ranks

    def _unless_lost(self, ranks: RankSet) -> RankSet | None:
        """The set, unless it broke since the last cell: then closed, and restarted now if that is allowed."""
        lost = ranks.lost_between_cells()
        if lost is None:
            return ranks
        ranks.close()
        error = RunFailed(f"the kept ranks were lost: {lost.label()} {lost.summary}. Their state is gone; run the "
                          "cell again to start new kept ranks.", {lost.rank: lost}, self.options.n)
        self._after(error, ranks)
        if self._lost is None:
            raise error
        return None

    def _after(self, error: RunFailed, ranks: RankSet) -> None:
        """A failure that broke the set (it closed itself) and that a restart can mend: at the next call."""
        if ranks.closed and restartable(error) is not None and self._restarts < self.options.max_restarts:
            self._lost = error
            error.extra.append(f"--max-restarts: the kept ranks start again from the last commit at the next cell "
                               f"({self.options.max_restarts - self._restarts} restarts left)")

    def _restart(self, quiet: bool = False) -> RankSet:
        """New ranks, the call that started the set run again on them (its jt.restore loads the last commit).
        ``quiet``: a background cell's thread says nothing (it would print into whichever cell runs now)."""
        lost, self._lost = self._lost, None
        assert lost is not None and self._first is not None and self._folder is not None
        self._restarts += 1
        step = self._folder.latest()
        first = self._first
        ranks = self._start(first)
        execute(first.payload, first.options, ranks, NullView(), filename=first.filename, source=first.source,
                title=first.title)
        root = lost.root
        if quiet:
            return ranks
        print(f"jupyter-torchdist: kept ranks restarted from step {step or 0}; names defined since then are gone "
              f"(the cell that started them ran again{f' after {root.label()} failed: {root.summary}' if root else ''})"
              f" - restart {self._restarts} of {self.options.max_restarts}")
        return ranks


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

