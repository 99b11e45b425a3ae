"""An idle notebook gives memory back (``launchers.idle_release``), and takes it back when it is used again.

After ``JUPYTER_TORCHDIST_IDLE_S`` seconds (or the extension's ``%config DistributeMagics.idle_seconds``; default 600,
0: never) with no cell executed, no run going and no kept ranks up, what only speeds up the next run is released;
the next cell (any cell: the notebook is in use again) brings it back in the background, so that a run a moment
later is as fast as before. A run right after the release pays at most a process server's or a worker's start.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Final

__all__ = ["IdleWatch", "IDLE_ENV", "DEFAULT_IDLE_S", "idle_seconds"]

IDLE_ENV: Final = "JUPYTER_TORCHDIST_IDLE_S"
DEFAULT_IDLE_S: Final = 600.0


def idle_seconds(configured: float) -> float:
    """The idle time before a release: the environment's setting, else the extension's configuration."""
    text = os.environ.get(IDLE_ENV, "").strip()
    try:
        return max(0.0, float(text)) if text else max(0.0, configured)
    except ValueError:
        return max(0.0, configured)


class IdleWatch:
    """Counts the notebook's idle time from the last cell and releases once per idle spell."""

    def __init__(self, seconds: Callable[[], float], busy: Callable[[], bool], release: Callable[[], list[str]],
                 rewarm: Callable[[], None]) -> None:
        self._seconds, self._busy, self._release, self._rewarm = seconds, busy, release, rewarm
        self.last = time.monotonic()
        self.released: list[str] | None = None   # what the current idle spell gave back
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        threading.Thread(target=self._loop, name="jupyter-torchdist-idle", daemon=True).start()

    def touch(self) -> None:
        """A cell runs: the notebook is in use; what a release gave back comes back in the background."""
        with self._lock:
            self.last = time.monotonic()
            released, self.released = self.released, None
        if released:
            threading.Thread(target=self._rewarm, name="jupyter-torchdist-rewarm", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()

    def check(self, now: float) -> list[str] | None:
        """Release if the notebook has been idle long enough (and nothing runs); what went, or None."""
        seconds = self._seconds()
        with self._lock:
            due = seconds > 0 and self.released is None and now - self.last >= seconds
        if not due or self._busy():
            return None
        gone = self._release()
        with self._lock:
            if gone and now - self.last >= seconds:  # no cell came meanwhile; nothing went: look again later
                self.released = gone
        return gone

    def _loop(self) -> None:
        while not self._stopped.wait(min(5.0, max(0.5, self._seconds() / 4 or 5.0))):
            try:
                self.check(time.monotonic())
            except Exception:
                pass  # a release that fails leaves things as they were; the next spell tries again
