"""A rank's end of the live channel.

Training code only ever appends to in-memory queues; one sender thread moves batches to the
socket. Progress is droppable, oldest first, when the kernel is slow; logs are kept up to a byte
budget (what passes it is counted and the kernel told); a cell's outcome is sent behind its logs.
Nothing here raises into training code.
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Any

from ..core import contract as C
from ..core.brief import evenly
from ..channel import protocol as P
from ..channel.handshake import Stream

__all__ = ["RankClient", "pace"]

PROGRESS_QUEUE = 256
PROGRESS_PER_BATCH = 16   # progress points kept per batch: the view draws ~10 frames/s, the curve needs no more
BATCH_INTERVAL_S = 0.05   # at most ~20 batches a second: the sender stays off the training thread's cores
LOG_BUDGET_BYTES = 8 << 20  # unsent log text a rank may queue; past it lines are counted, not kept
# The kernel hears from all ranks together at most about this many batches a second, whatever their number: past 20
# ranks each rank batches less often (up to MAX_INTERVAL_S, well inside the kernel's silence limit) and keeps fewer
# progress points per batch, so the kernel's work per second stays flat as the rank count grows (issue 35).
KERNEL_BATCHES_PER_S = 400
MAX_INTERVAL_S = 2.0
SMALL_WORLD = 64          # up to this many ranks, every batch keeps PROGRESS_PER_BATCH points


def pace(world_size: int) -> tuple[float, int]:
    """(seconds between a rank's batches, progress points per batch) for a run of ``world_size`` ranks."""
    n = max(1, world_size)
    interval = min(MAX_INTERVAL_S, max(BATCH_INTERVAL_S, n / KERNEL_BATCHES_PER_S))
    keep = PROGRESS_PER_BATCH if n <= SMALL_WORLD else max(2, PROGRESS_PER_BATCH * SMALL_WORLD // n)
    return interval, keep


def _plain(value: Any) -> Any:
    """A metric as a plain number or short string; tensors are read here, off the training thread."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value if not isinstance(value, str) else value[:80]
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except Exception:
            pass
    return str(value)[:80]


def _thin(queued: list[C.ProgressMsg], keep: int) -> list[C.ProgressMsg]:
    """At most ``keep`` progress points, evenly spread and always the latest."""
    return evenly(queued, keep)


class RankClient:
    """Non-blocking reporting from training code to the kernel, over one sender thread.

    ``send_final`` puts a cell's last messages behind everything already queued and waits until
    the sender has written them: the kernel then has the cell's whole log before its outcome.
    Otherwise a batch goes at most once an ``interval``, the first after a quiet spell included:
    only ``urgent`` messages (a request the rank waits on) and ``send_final`` go at once.
    """

    def __init__(self, sock: Stream, world_size: int = 1, *, every_point: bool = False) -> None:
        self.sock = sock
        self.interval, self.keep = pace(world_size)
        if every_point:  # a tracked run's rank 0: its record has every report() (up to the queue's bound)
            self.keep = PROGRESS_QUEUE
        self.dropped_progress = 0
        self.dropped_log_lines = 0
        self.dropped_log_bytes = 0
        self._told_dropped = (0, 0)
        self._progress: collections.deque[C.ProgressMsg] = collections.deque(maxlen=PROGRESS_QUEUE)
        self._logs: collections.deque[C.RankMessage] = collections.deque()  # logs, and what must arrive in order
        self._finals: list[C.FinalMessage] = []   # a cell's outcome: always last in its batch
        self._usage: C.UsageMsg | None = None     # the latest usage reading: a newer one replaces it
        self._log_bytes = 0
        self._cond = threading.Condition()
        self._queued = 0   # messages ever put in _logs (a position, for send_final's wait)
        self._sent = 0     # ... of which the sender has written (or given up on) this many
        self._urgent = False
        self._asleep = False   # the sender waits for anything at all: the next post wakes it
        self._closing = False
        self._broken = False
        self._thread = threading.Thread(target=self._run, name="jtd-sender", daemon=True)
        self._thread.start()

    def post_progress(self, msg: C.ProgressMsg) -> None:
        """Queue a progress point; if the queue is full the oldest one is dropped."""
        with self._cond:
            if len(self._progress) == PROGRESS_QUEUE:
                self.dropped_progress += 1
            self._progress.append(msg)
            self._wake()

    def post_usage(self, msg: C.UsageMsg) -> None:
        """Leave the latest usage reading to go with the next batch (an unsent older one is replaced)."""
        with self._cond:
            self._usage = msg
            self._wake()

    def post(self, msg: C.RankMessage, *, urgent: bool = False) -> None:
        """Queue a message that must arrive (a state change), in order with the logs; ``urgent`` skips the
        sender's rate limit (a request the rank waits on)."""
        with self._cond:
            self._logs.append(msg)
            self._queued += 1
            self._urgent = self._urgent or urgent
            if urgent:
                self._cond.notify()
            else:
                self._wake()

    def post_log(self, stream: C.Stream, text: str, at: float) -> None:
        """Queue a log line; past the byte budget lines are counted (and the kernel told), not kept."""
        with self._cond:
            if self._log_bytes + len(text) > LOG_BUDGET_BYTES:
                self.dropped_log_lines += 1
                self.dropped_log_bytes += len(text)
                self._wake()
                return
            self._log_bytes += len(text)
            self._logs.append({"t": C.LOG, "stream": stream, "text": text, "at": at})
            self._queued += 1
            self._wake()

    def _wake(self) -> None:
        """Wake the sender if it waits for anything at all (under the lock)."""
        if self._asleep:
            self._cond.notify()

    def _dropped_notice(self) -> list[C.DroppedMsg]:
        """One DROPPED message when the counts changed since the last one (under the lock)."""
        now = (self.dropped_log_lines, self.dropped_progress)
        if now == self._told_dropped:
            return []
        self._told_dropped = now
        return [{"t": C.DROPPED, "log_lines": self.dropped_log_lines, "log_bytes": self.dropped_log_bytes,
                 "progress": self.dropped_progress}]

    def _take(self, not_before: float) -> tuple[list[C.RankMessage], int] | None:
        with self._cond:
            while not self._closing:
                left = not_before - time.monotonic()
                queued = bool(self._progress or self._logs or self._finals or self._usage)
                if queued and (left <= 0 or self._urgent):
                    break
                # With something queued the sender wakes at its time anyway: a post need not wake it (a rank's
                # every report() would otherwise be a thread switch), only an urgent one or send_final does.
                idle = self._asleep = not queued
                self._cond.wait(left if queued else None)
                self._asleep = False
                if idle and not self._urgent:  # the first message after a quiet spell waits its interval too:
                    not_before = max(not_before, time.monotonic() + self.interval)  # a short cell's start, output
                    # and outcome then reach the kernel in one frame (send_final's), not three, each of them waking
                    # the kernel on the cores the cell's collectives need (a kept all_reduce cell: 1 ms of its 3)
            if not (self._progress or self._logs or self._finals or self._usage):
                return None
            usage: list[C.RankMessage] = [self._usage] if self._usage is not None else []
            batch: list[C.RankMessage] = [*self._logs, *self._dropped_notice(),
                                          *_thin(list(self._progress), self.keep), *usage, *self._finals]
            self._usage = None
            self._logs.clear()
            self._progress.clear()
            self._finals = []
            self._log_bytes = 0
            self._urgent = False
            return batch, self._queued

    def _run(self) -> None:
        not_before = 0.0
        while (taken := self._take(not_before)) is not None:
            batch, upto = taken
            not_before = time.monotonic() + self.interval
            if not self._broken:
                try:
                    for msg in batch:
                        if msg["t"] == C.PROGRESS and msg["metrics"]:
                            msg["metrics"] = {str(k): _plain(v) for k, v in msg["metrics"].items()}
                    P.send_frame(self.sock, batch)
                except Exception:
                    self._broken = True  # the kernel went away; training goes on, reports are dropped
            with self._cond:
                self._sent = upto
                self._cond.notify_all()

    def send_final(self, final: list[C.FinalMessage], timeout: float | None = None) -> bool:
        """Send ``final`` after everything queued before it; True once written, False if the kernel is gone."""
        with self._cond:
            self._finals.extend(final)
            self._queued += len(final)
            target, self._urgent = self._queued, True
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._sent >= target or not self._thread.is_alive(), timeout)
            return self._sent >= target and not self._broken

    def close(self) -> None:
        """Send what is queued, then stop the sender thread."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
