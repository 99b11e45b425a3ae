"""Kept ranks: start N ranks once, run cell after cell on them with their state kept, stop them when asked.

``Ranks`` is the API (``with jt.Ranks(n=2) as ranks: ranks.run(fn)``); the magic's ``--keep`` holds one
for the notebook (``notebook_ranks``). The ranks, their process group and their channel stay up between
cells; each cell has its own state, view and result, supervised by ``KeptSupervisor`` (which decides
whether the ranks survive a failure or an interrupt). Nothing outlives the kernel: ``atexit`` stops every
set, and a kernel that dies takes them with it (their agents kill them when the channel closes).
"""
from __future__ import annotations

import atexit
import weakref
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..options import RunOptions
from ..views import NullView, RunView
from .kept_cell import kept_cell
from .pickling import pack
from .rankset import KeptInfo, RankSet
from .result import RunResult
from .run import execute

__all__ = ["Ranks", "KeptInfo", "notebook_ranks", "set_notebook_ranks"]


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
        self._set: RankSet | None = None
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
        return self._up is not None

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
        kept, self._set = self._up, None
        if kept is None:
            return False
        kept.close()
        return True

    def describe(self) -> KeptInfo | None:
        up = self._up
        return up.describe() if up is not None else None

    def execute(self, payload: bytes, options: RunOptions, *, title: str, view: RunView | None = None,
                filename: str = "<distributed>", source: str = "") -> RunResult:
        """Run one packed payload as the next cell (starting the ranks first if none are up)."""
        ranks = self._up
        if ranks is None:
            ranks = self._set = RankSet(replace(options, keep=True), keep=True)
        return execute(payload, options, ranks, view or NullView(), filename=filename, source=source, title=title)


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

