"""Capture a rank's stdout and stderr at the file-descriptor level, line by line.

Descriptor level so that C++ warnings, `!cmd` output and subprocesses are caught too, not only
Python's print. Each line goes to ``sink(stream, text)``; a carriage return ends a line, so
progress bars printed by other libraries become lines instead of garbage.
"""
from __future__ import annotations

import io
import os
import sys
import threading
import time
from typing import Callable

from ..core.contract import Stream

__all__ = ["FdCapture"]

MAX_LINE = 10_000


class _Stream:
    def __init__(self, fd: int, name: Stream, sink: Callable[[Stream, str, float], None]) -> None:
        self.fd, self.name, self.sink = fd, name, sink
        self.saved = os.dup(fd)
        read_end, write_end = os.pipe()
        os.dup2(write_end, fd)
        os.close(write_end)
        self.read_end = read_end
        self.thread = threading.Thread(target=self._pump, name=f"jtd-{name}", daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        pending = b""
        while True:
            try:
                chunk = os.read(self.read_end, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            pending += chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            *lines, pending = pending.split(b"\n")
            now = time.time()
            for line in lines:
                self.sink(self.name, line[:MAX_LINE].decode("utf-8", "replace"), now)
            if len(pending) > MAX_LINE:
                self.sink(self.name, pending[:MAX_LINE].decode("utf-8", "replace"), now)
                pending = b""
        if pending:
            self.sink(self.name, pending.decode("utf-8", "replace"), time.time())
        os.close(self.read_end)

    def restore(self, wait: float) -> None:
        os.dup2(self.saved, self.fd)  # drops our reference to the pipe's write end
        os.close(self.saved)
        self.thread.join(wait)  # a leftover grandchild may hold the pipe open: don't wait on it


class FdCapture:
    """Redirect fds 1 and 2 into ``sink`` until ``close``."""

    def __init__(self, sink: Callable[[Stream, str, float], None]) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self._streams = [_Stream(1, "stdout", sink), _Stream(2, "stderr", sink)]
        self._old = sys.stdout, sys.stderr
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True, errors="replace")
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True, errors="replace")

    def close(self, wait: float = 1.0) -> None:
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                pass
        sys.stdout, sys.stderr = self._old
        for s in self._streams:
            s.restore(wait)
