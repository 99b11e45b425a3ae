"""Offline runs: when the executors cannot reach the notebook's kernel, rank 0's task stands in for it.

A laptop behind NAT talking to a remote Spark Connect server cannot be dialled back. The run still works: the
ranks talk to a relay that rank 0's task opens inside the cluster (a ``ChannelServer`` of the same run, secret
included), which does the kernel's live duties (the rendezvous, the release once every rank has ended, stopping
the others when one fails) and records every message. The record comes back to the kernel with the barrier
stage's result rows, and the kernel replays it into its own state: the value, each rank's end, its traceback and
the tail of its log arrive as they would have live, only at the end.
"""
from __future__ import annotations

import collections
import queue
import threading
from typing import Final

from ..core import contract as C
from ..channel.server import ChannelServer
from ..core.contract import Inbound, RunPlan
from ..core.errors import is_secondary
from ..core.rendezvous import plan_rendezvous

__all__ = ["Relay", "LOG_LINES_KEPT"]

LOG_LINES_KEPT: Final = 2000      # per rank: the tail of its log comes back
PROGRESS_KEPT: Final = 200        # per rank: its last progress points
_FRAME_SLACK: Final = 8 << 20


class Relay:
    """The run's channel inside the cluster, for ranks that cannot reach the kernel. ``start`` then ``finish``."""

    def __init__(self, plan: RunPlan, host: str) -> None:
        self.plan = plan
        self.server = ChannelServer(plan.world_size, host=host, secret=plan.secret,
                                    max_frame=plan.max_value_bytes + _FRAME_SLACK, watcher="the Spark task",
                                    files=dict(plan.inline).get)  # the notebook's code, when the plan carries it
        self._kept: list[Inbound] = []
        self._logs: dict[int, collections.deque[Inbound]] = collections.defaultdict(
            lambda: collections.deque(maxlen=LOG_LINES_KEPT))
        self._progress: dict[int, collections.deque[Inbound]] = collections.defaultdict(
            lambda: collections.deque(maxlen=PROGRESS_KEPT))
        self._hellos: dict[int, C.HelloMsg] = {}
        self._ended: set[int] = set()
        self._exited: set[int] = set()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="jtd-relay", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        return self.server.address

    def start(self) -> None:
        self._thread.start()

    def _serve(self) -> None:
        while len(self._exited) < self.plan.world_size:
            try:
                self._take(self.server.inbox.get(timeout=1.0))
            except queue.Empty:
                continue
        self._done.set()

    def _take(self, ev: Inbound) -> None:
        msg = ev.msg
        if msg["t"] == C.LOG:
            self._logs[ev.rank].append(ev)
        elif msg["t"] == C.PROGRESS:
            self._progress[ev.rank].append(ev)
        else:
            self._kept.append(ev)
        if msg["t"] == C.HELLO:
            self._hellos[ev.rank] = msg
            if len(self._hellos) == self.plan.world_size:
                self._rendezvous()
        elif msg["t"] == C.RESULT or msg["t"] == C.FAILED:
            self._ended.add(ev.rank)
            if msg["t"] == C.FAILED and not is_secondary(msg["summary"], msg.get("traceback", "")):
                self.server.stop_all("failed", spare=self._ended)  # a real failure: stop the others now
            if len(self._ended) == self.plan.world_size:
                for rank in range(self.plan.world_size):
                    self.server.send(rank, C.RANK, {"t": C.RELEASE})
        elif msg["t"] == C.EXIT:
            self._exited.add(ev.rank)

    def _rendezvous(self) -> None:
        try:
            messages = plan_rendezvous(self._hellos, self.plan.world_size)
        except ValueError as exc:  # said to the kernel as its own supervisor says it (a placement it cannot make)
            self._kept.append(Inbound(0, C.BACKEND, {"t": C.LOST, "summary": f"rendezvous failed: {exc}"}))
            self.server.stop_all("failed")
            return
        for rank, msg in messages.items():
            self.server.send(rank, C.RANK, msg)

    def finish(self, timeout: float = 30.0) -> list[Inbound]:
        """Wait (up to ``timeout``) for every rank's end; what the kernel should replay, in order."""
        self._done.wait(timeout)
        self.server.close()
        tail = [ev for lane in (*self._progress.values(), *self._logs.values()) for ev in lane]
        return sorted(self._kept + tail, key=lambda ev: ev.at)
