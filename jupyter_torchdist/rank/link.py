"""A rank's reader of what the kernel sends it: one thread for the rank's life, each message to its taker.

Between cells the kernel sends RELEASE (one-shot ranks may exit) and CELL (kept ranks run it); during a
cell it answers ``batches()`` (DATA_PLAN, DATA_ERROR). One thread reads the socket and routes: data
messages to the handler the data API installed, the rest to the main loop (``next_cell``,
``wait_release``), which learns from ``None`` that the kernel closed the channel. Debugging: WHERE is
answered on this thread (``on_where``: the main thread may be stuck), PDB_REPLY goes to the rank's debugger
(``pdb_reply``).
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, cast

from ..core import contract as C
from ..channel import protocol as P
from . import preemption

__all__ = ["KernelLink"]

MAX_FRAME = 1 << 31  # a kept cell's payload can be large


class KernelLink:
    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._main: queue.SimpleQueue[C.ToRank | None] = queue.SimpleQueue()
        self._data: Callable[[C.DataReply | None], None] | None = None
        self._where: Callable[[], None] | None = None
        self._asked = False  # a WHERE came before on_where: answered once the handler is there
        self._pdb: queue.SimpleQueue[C.PdbReplyMsg | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._run, name="jtd-link", daemon=True).start()

    def on_data(self, handler: Callable[[C.DataReply | None], None]) -> None:
        """Route DATA_PLAN and DATA_ERROR to ``handler`` (called on the link's thread; None: channel closed)."""
        with self._lock:
            self._data = handler
            closed = self.closed
        if closed:
            handler(None)

    def on_where(self, handler: Callable[[], None]) -> None:
        """Answer WHERE with ``handler`` (called on the link's thread: it sends the main thread's stack).

        The kernel may ask as soon as every rank has said hello, before this rank got here: that WHERE is answered
        now rather than dropped (a silent rank reads as one holding the GIL or gone)."""
        with self._lock:
            self._where, asked, self._asked = handler, self._asked, False
        if asked:
            handler()

    def pdb_reply(self) -> C.PdbReplyMsg | None:
        """The kernel's next answer to this rank's debugger; None once the channel is closed."""
        reply = self._pdb.get()
        if reply is None:
            self._pdb.put(None)  # every later caller learns it too
        return reply

    def _run(self) -> None:
        while True:
            try:
                frame = P.recv_frame(self._sock, MAX_FRAME)
            except Exception:
                break
            if isinstance(frame, dict):
                self._route(cast("C.ToRank", frame))  # from the kernel: the handshake proved it holds the secret
        with self._lock:
            self.closed, handler = True, self._data
        if handler is not None:
            handler(None)
        self._main.put(None)
        self._pdb.put(None)

    def _route(self, msg: C.ToRank) -> None:
        if msg["t"] == C.DATA_PLAN or msg["t"] == C.DATA_ERROR:
            with self._lock:
                handler = self._data
            if handler is not None:
                handler(msg)
        elif msg["t"] == C.WHERE:
            with self._lock:
                answer, self._asked = self._where, self._where is None
            if answer is not None:
                answer()
        elif msg["t"] == C.PDB_REPLY:
            self._pdb.put(msg)
        elif msg["t"] == C.PREEMPT:
            preemption.heard(msg)
        else:
            self._main.put(msg)

    def _next_main(self) -> C.ToRank | None:
        msg = self._main.get()
        if msg is None:
            self._main.put(None)  # every later caller learns it too
        return msg

    def next_cell(self) -> C.CellMsg | None:
        """Kept ranks: the next cell to run (other messages are skipped); None once the channel is closed."""
        while (msg := self._next_main()) is not None:
            if msg["t"] == C.CELL:
                return msg
        return None

    def wait_release(self) -> bool:
        """Wait until the kernel says every rank has ended its cell (True) or closes the channel (False)."""
        while (msg := self._next_main()) is not None:
            if msg["t"] == C.RELEASE:
                return True
        return False
