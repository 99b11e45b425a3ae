"""The --local backend: N ranks as processes on the kernel's machine. No Spark; pyspark is never imported.

Ranks are forked by the per-kernel process server (``local_server``), which imported torch once.

It also stands in for the embedded Spark session (``launchers.stand_in``), under a label that says why:

- **while the session starts.** ``%load_ext`` starts two things in the background: the local process server (a
  Python that imports torch, about 2 seconds) and then the embedded Spark session (a JVM, its services and Python
  workers: 10 seconds and more on a laptop). Without a session of its own, a notebook's ranks run on this machine
  either way; a cell run before the JVM is up (Run All, a student who types fast) need not wait for it. Once the
  session is up, runs go to it as usual. Runs that must be Spark tasks (``TorchDistributor(local_mode=False)``,
  ``horovod.spark.run``) wait for it.
- **with no Java here.** Spark needs a Java runtime; a laptop or a hosted notebook often has none. Rather than a
  first cell that works (while a JVM that cannot start is "starting") and a later one that fails, every run without
  a session of the notebook's own goes to local processes, and the first one says once why and what installing
  Java adds. Runs that must be Spark tasks still say that Spark needs Java.
"""
from __future__ import annotations

import os
import queue
import sys
import threading
from typing import Any, Final

from ..core import contract as C
from ..channel.tls import tls_requested
from ..core.contract import Inbound, LaunchInfo, RunPlan
from ..core.gpus import placements, require_local_gpus
from ..core.options import RunOptions
from .limits import check_ranks
from .base import Capacity, Launcher
from .local_server import Zygote, get_zygote

__all__ = ["LocalLauncher", "STAND_IN_LABELS", "NO_JAVA_NOTICE"]

STAND_IN_LABELS: Final = {"warming": "local processes (the embedded Spark session is still starting)",
                          "no-java": "local processes (no Java here for Spark)"}
NO_JAVA_NOTICE: Final = ("no Java found (no java on PATH, JAVA_HOME not set): runs use local processes on this "
                         "machine, as with --local. Installing Java 17 or newer adds Spark tasks (clusters, "
                         "TorchDistributor(local_mode=False)) and Spark DataFrames through "
                         "jupyter_torchdist.batches().")


class _Said:
    no_java = False  # the notice goes with the first such run only


def _kernel_context() -> dict[str, Any]:
    return {"cwd": os.getcwd(), "path": list(sys.path), "env": dict(os.environ)}


class LocalLauncher(Launcher):
    """N ranks on this machine, forked from the zygote; same contract as the Spark backend."""

    name = "local"

    def __init__(self) -> None:
        self._gpus: list[str] | None = None
        self._key: str | None = None
        self._zygote: Zygote | None = None
        self.stands_in: str | None = None  # for the embedded session: "warming", "no-java" (None: --local)

    def prepare(self, options: RunOptions) -> LaunchInfo:
        from . import stand_in

        check_ranks("local_ranks", options.n)
        self.stands_in = stand_in(options)
        self._gpus = None
        if options.gpu:
            self._gpus = require_local_gpus(options.n, options.gpus)
        warnings: tuple[str, ...] = ()
        if self.stands_in == "no-java" and not _Said.no_java:
            _Said.no_java, warnings = True, (NO_JAVA_NOTICE,)
        # loopback only, so TLS matters little here; honoured all the same when the environment asks for it
        return LaunchInfo(label=STAND_IN_LABELS.get(self.stands_in or "", "local"), channel_host="127.0.0.1",
                          loopback=True, channel_tls=tls_requested(lambda key: None), warnings=warnings,
                          watcher="the local agent process", lost_hint="The kernel's stderr may say why.")

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
        zygote.asked = zygote.asked or self.stands_in is None  # an explicit --local run: kept when idle
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
