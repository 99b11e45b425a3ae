"""Kept ranks: after the first cell, a rank waits for the next one and runs it in the same namespace.

A kept cell runs like a notebook cell: module-level code in the rank's own globals, so ``model``,
``opt`` and ``step`` assigned in one cell are there in the next; a trailing expression is the value.
The kernel ships the notebook values a cell reads that the rank does not define; names the rank's own
code defined win (``Namespace.take``). The process group stays up between cells.

An interrupt (``INTERRUPT`` to the agent, which sends SIGINT) raises ``KeyboardInterrupt`` in the cell's
Python code only; between cells it is ignored, so a late one cannot kill the loop.
"""
from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

from ..core import contract as C
from ..core._sources import register_source
from .client import RankClient
from .kept_payload import Namespace
from .link import KernelLink

__all__ = ["serve_cells"]


class _Interruptible:
    """SIGINT raises KeyboardInterrupt while a cell runs, and is ignored between cells."""

    running = False

    def __init__(self) -> None:
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self.running:
            raise KeyboardInterrupt


def serve_cells(first: C.CellMsg, link: KernelLink, client: RankClient, rank: int,
                run_cell: Callable[[C.CellMsg, Namespace, _Interruptible], C.FinalMessage]) -> int:
    """Run ``first``, then every cell the kernel sends, until it closes the channel. Returns the exit code.

    ``run_cell(cell_msg, namespace, guard)`` runs one cell and returns its final message.
    """
    ns, guard = Namespace(), _Interruptible()
    cell: C.CellMsg | None = first
    while cell is not None:
        final = run_cell(cell, ns, guard)
        final["cell"] = cell["cell"]
        if rank == 0 and final["t"] == C.RESULT:
            final["names"] = sorted(ns.own_names())
        client.send_final([final])
        register_source(cell["filename"], cell["source"])  # keep tracebacks of earlier cells readable
        cell = link.next_cell()
    return 0
