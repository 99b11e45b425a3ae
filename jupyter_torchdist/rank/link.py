"""A rank's reader of what the kernel sends it: one thread for the rank's life, each message to its taker.

Between cells the kernel sends RELEASE (one-shot ranks may exit) and CELL (kept ranks run it); during a
cell it answers ``batches()`` (DATA_PLAN, DATA_ERROR). One thread reads the socket and routes: data
messages to the handler the data API installed, the rest to the main loop. ``None`` from ``next_main``
means the kernel closed the channel.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from .. import contract as C
from ..channel import protocol as P

__all__ = ["KernelLink"]

MAX_FRAME = 1 << 31  # a kept cell's payload can be large


class KernelLink:
    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._main: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self._data: Callable[[dict[str, Any] | None], None] | None = None
        self._lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._run, name="jtd-link", daemon=True).start()

    def on_data(self, handler: Callable[[dict[str, Any] | None], None]) -> None:
        """Route DATA_PLAN and DATA_ERROR to ``handler`` (called on the link's thread; None: channel closed)."""
        with self._lock:
            self._data = handler
            closed = self.closed
        if closed:
            handler(None)

    def _run(self) -> None:
        while True:
            try:
                msg = P.recv_frame(self._sock, MAX_FRAME)
            except Exception:
                break
            if not isinstance(msg, dict):
                continue
            if msg.get("t") in (C.DATA_PLAN, C.DATA_ERROR):
                with self._lock:
                    handler = self._data
                if handler is not None:
                    handler(msg)
            else:
                self._main.put(msg)
        with self._lock:
            self.closed, handler = True, self._data
        if handler is not None:
            handler(None)
        self._main.put(None)

    def next_main(self, *kinds: str) -> dict[str, Any] | None:
        """The next message of one of ``kinds`` for the main loop (others are skipped); None once closed."""
        while True:
            msg = self._main.get()
            if msg is None:
                self._main.put(None)  # every later caller learns it too
                return None
            if msg.get("t") in kinds:
                return msg
