"""The --local backend: N ranks as processes on the kernel's machine. No Spark; pyspark is never imported.

Ranks are forked by the per-kernel process server (``local_server``), which imported torch once.
"""
from __future__ import annotations

import os
import queue
import sys
import threading
from typing import Any

from ..core import contract as C
from ..channel.tls import tls_requested
from ..core.contract import Inbound, LaunchInfo, RunPlan
from ..core.gpus import placements, require_local_gpus
from ..core.options import RunOptions
from .limits import check_ranks
from .base import Capacity, Launcher
from .local_server import Zygote, get_zygote

__all__ = ["LocalLauncher"]


def _kernel_context() -> dict[str, Any]:
    return {"cwd": os.getcwd(), "path": list(sys.path), "env": dict(os.environ)}


class LocalLauncher(Launcher):
    """N ranks on this machine, forked from the zygote; same contract as the Spark backend."""

    name = "local"
    label = "local"

    def __init__(self) -> None:
        self._gpus: list[str] | None = None
        self._key: str | None = None
        self._zygote: Zygote | None = None

    def prepare(self, options: RunOptions) -> LaunchInfo:
        check_ranks("local_ranks", options.n)
        self._gpus = None
        if options.gpu:
            self._gpus = require_local_gpus(options.n, options.gpus)
        # loopback only, so TLS matters little here; honoured all the same when the environment asks for it
        return LaunchInfo(label=self.label, channel_host="127.0.0.1", loopback=True,
                          channel_tls=tls_requested(lambda key: None), watcher="the local agent process",
                          lost_hint="The kernel's stderr may say why.")

    def start(self, plan: RunPlan, inbox: queue.SimpleQueue[Inbound]) -> None:
        key = self._key = plan.run_id
        ended: dict[int, tuple[int | None, str | None]] = {}
        done = threading.Event()

        def finish(error: str | None) -> None:
            if not done.is_set():
                done.set()
                zygote.forget(key)
                inbox.put(Inbound(-1, C.BACKEND, {"t": C.JOB_END, "error": error}))

        def on_event(msg: tuple[Any, ...]) -> None:
            if msg[0] == "lost":
                finish(msg[2])
                return
            _, _, rank, code, sig = msg
            ended[rank] = (code, sig)
            if len(ended) == plan.world_size:
                bad = [f"rank {r}'s agent {'was killed by ' + s if s else f'exited with code {c}'}"
                       for r, (c, s) in sorted(ended.items()) if s or c]
                finish("; ".join(bad) + " (see the kernel's stderr)" if bad else None)

        zygote = self._zygote = get_zygote()
        zygote.asked = zygote.asked or self.name == "local"
        if not zygote.register(key, on_event):
            finish(zygote.dead)
            return
        placed: list[tuple[int, str | None]] = (
            list(placements(0, plan.world_size, [], self._gpus, plan.world_size)) if self._gpus
            else [(r, None) for r in range(plan.world_size)])
        zygote.send(("start", key, plan, placed, _kernel_context()))

    def capacity(self) -> Capacity:
        cores = os.cpu_count() or 1
        return Capacity(slots=None, default_ranks=cores, where="this machine")

    def cancel(self) -> None:
        if self._zygote is not None and self._key is not None:
            self._zygote.send(("kill", self._key))
