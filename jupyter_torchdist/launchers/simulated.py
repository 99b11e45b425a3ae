"""Simulated ranks, for tests and benchmarks at scales this machine cannot hold as real ranks (1,024 to 4,096).

A simulated rank runs none of the cell's code and no torch. It speaks the real channel protocol as a real rank and
its agent do (the handshake with the run's secret, TLS when the run has it, HELLO and RENDEZVOUS, the rank's own
sender with its budgets, BEATs, EXIT), so everything on the kernel's side runs as it would: the channel server, the
supervisor, the state, the views and the report. Many ranks share a process (a thread each): ``PER_PROCESS``.

Chosen when ``JUPYTER_TORCHDIST_SIMULATE`` is set in the kernel's environment, to what the ranks should do, e.g.
``steps=100,every=0.1,log_every=10,hosts=64,fail_rank=17,fail_at=3``: each rank reports progress (and a loss) every
``every`` seconds for ``steps`` steps, a log line every ``log_every`` steps, a usage sample every second; ranks
are spread over ``hosts`` simulated host names; ``fail_rank`` raises at ``fail_at`` seconds. Rank 0's value is
``{"rank": 0, "steps": steps}``. Registered in ``launchers/__init__.py`` above every other backend.
"""
from __future__ import annotations

import math
import os
import queue
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, fields
from typing import Any, Final

import cloudpickle

from .. import contract as C
from ..contract import Inbound, LaunchInfo, RunPlan
from ..errors import LaunchError
from ..options import RunOptions
from .base import Capacity, Launcher

__all__ = ["SimulatedLauncher", "SimSpec", "SIMULATE_ENV", "requested", "PER_PROCESS"]

SIMULATE_ENV: Final = "JUPYTER_TORCHDIST_SIMULATE"
PER_PROCESS: Final = 256   # simulated ranks (threads) per process


@dataclass(frozen=True)
class SimSpec:
    """What every simulated rank does."""
    steps: int = 100
    every: float = 0.1          # seconds between progress reports
    log_every: int = 10         # steps between log lines (0: none)
    hosts: int = 1              # simulated host names the ranks are spread over
    fail_rank: int = -1         # this rank raises ...
    fail_at: float = 0.0        # ... this many seconds after it started

    @staticmethod
    def parse(text: str) -> SimSpec:
        kinds = {f.name: f.type for f in fields(SimSpec)}
        values: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, raw = part.partition("=")
            if not sep or key.strip() not in kinds:
                raise LaunchError(f"{SIMULATE_ENV}={text!r}: {part!r} is not one of "
                                  f"{', '.join(k + '=...' for k in kinds)}")
            try:
                values[key.strip()] = (float if kinds[key.strip()] in (float, "float") else int)(raw)
            except ValueError:
                raise LaunchError(f"{SIMULATE_ENV}: {key}={raw!r} is not a number") from None
        return SimSpec(**values)


def requested(options: RunOptions | None = None) -> bool:
    """Whether runs go to simulated ranks (the kernel's environment says so)."""
    return bool(os.environ.get(SIMULATE_ENV))


_WORKER = ("import sys, cloudpickle\n"
           "from jupyter_torchdist.launchers.simulated import serve\n"
           "serve(*cloudpickle.load(sys.stdin.buffer))\n")


class SimulatedLauncher(Launcher):
    """Simulated ranks in ``ceil(N / PER_PROCESS)`` processes on this machine, over loopback."""

    name = "simulated"

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[bytes]] = []
        self._spec = SimSpec()

    def prepare(self, options: RunOptions) -> LaunchInfo:
        self._spec = SimSpec.parse(os.environ.get(SIMULATE_ENV, ""))
        return LaunchInfo(label=f"simulated ranks ({self._spec.hosts} hosts)", channel_host="127.0.0.1",
                          loopback=True, watcher="the simulated agent")

    def start(self, plan: RunPlan, inbox: queue.SimpleQueue[Inbound]) -> None:
        ranks = list(range(plan.world_size))
        for first in range(0, len(ranks), PER_PROCESS):
            proc = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE, start_new_session=True)
            assert proc.stdin is not None
            proc.stdin.write(cloudpickle.dumps((plan, ranks[first:first + PER_PROCESS], self._spec)))
            proc.stdin.close()
            self._procs.append(proc)
        threading.Thread(target=self._wait, args=(inbox,), name="jtd-sim-wait", daemon=True).start()

    def _wait(self, inbox: queue.SimpleQueue[Inbound]) -> None:
        codes = [proc.wait() for proc in self._procs]
        bad = [f"simulated ranks' process {i} exited with {c}" for i, c in enumerate(codes) if c]
        inbox.put(Inbound(-1, C.BACKEND, {"t": C.JOB_END, "error": "; ".join(bad) or None}))

    def cancel(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()

    def capacity(self) -> Capacity:
        return Capacity(slots=None, default_ranks=2, where="simulated ranks on this machine")


# -- the simulated ranks' side (in the worker processes) ----------------------------------------------------------
def serve(plan: RunPlan, ranks: list[int], spec: SimSpec) -> None:
    """Run ``ranks`` as threads until every one has ended."""
    threads = [threading.Thread(target=_SimRank(plan, rank, spec).run, name=f"sim-{rank}", daemon=True)
               for rank in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


class _SimRank:
    """One rank and its agent: two authenticated connections, as a real rank's process and its agent hold."""

    def __init__(self, plan: RunPlan, rank: int, spec: SimSpec) -> None:
        self.plan, self.rank, self.spec = plan, rank, spec
        self.host = f"sim-{rank * spec.hosts // max(1, plan.world_size):03d}"
        self.stopped = False
        self.agent: Any = None
        self.beat_due = 0.0

    def run(self) -> None:
        from ..channel import protocol as P
        from ..channel.client import connect

        self.agent = connect(self.plan.address, self.plan.secret, self.rank, P.ROLE_AGENT, tls=self.plan.tls,
                             timeout=120)
        P.send_frame(self.agent, {"t": C.AGENT_HELLO, "host": self.host, "pid": os.getpid(), "child": os.getpid()})
        code = 1
        try:
            code = self._rank(P, connect)
        except Exception:
            code = 1
        finally:
            try:
                P.send_frame(self.agent, {"t": C.EXIT, "code": None if self.stopped else code,
                                          "signal": "SIGKILL" if self.stopped else None, "stopped": self.stopped,
                                          "at": time.time()})
                self.agent.close()
            except OSError:
                pass

    def _heard(self, P: Any) -> None:
        """Beat when due; take a STOP from the kernel (the rank is then gone, as a killed one would be)."""
        now = time.monotonic()
        if now >= self.beat_due:
            P.send_frame(self.agent, {"t": C.BEAT})
            self.beat_due = now + C.HEARTBEAT_S
        while select.select([self.agent], [], [], 0)[0]:
            frame = P.recv_frame(self.agent, 1 << 16)
            if isinstance(frame, dict) and frame.get("t") == C.STOP:
                self.stopped = True
                return

    def _rank(self, P: Any, connect: Any) -> int:
        from ..rank.client import RankClient
        from ..rank.values import final_message

        sock = connect(self.plan.address, self.plan.secret, self.rank, P.ROLE_RANK, tls=self.plan.tls, timeout=120)
        hello: dict[str, Any] = {"t": C.HELLO, "host": self.host, "ip": "127.0.0.1", "pid": os.getpid()}
        if self.rank == 0:
            hello["store_port"] = 1  # no store: nothing dials it
        P.send_frame(sock, hello)
        frame = P.recv_frame(sock, 1 << 20)
        if not isinstance(frame, dict) or frame.get("t") != C.RENDEZVOUS:
            return 1
        client = RankClient(sock)
        client.post({"t": C.STATE, "state": "starting"})
        client.post({"t": C.STATE, "state": "running"})
        outcome = self._train(P, client)
        if self.stopped:
            return 1
        kind, value = outcome
        final = final_message(kind, value, filename="<simulated>", send_value=self.rank == 0,
                              max_bytes=self.plan.max_value_bytes)
        client.send_final([final])
        while not self.stopped:  # stay until the kernel releases every rank (or stops this one)
            self._heard(P)
            if select.select([sock], [], [], 0.2)[0]:
                try:
                    msg = P.recv_frame(sock, 1 << 20)
                except (EOFError, OSError):
                    break
                if isinstance(msg, dict) and msg.get("t") == C.RELEASE:
                    break
        return 0 if kind == "ok" else 1

    def _train(self, P: Any, client: Any) -> tuple[str, Any]:
        spec, started = self.spec, time.monotonic()
        usage_due = started
        for step in range(1, spec.steps + 1):
            self._heard(P)
            if self.stopped:
                return "error", RuntimeError("stopped")
            now = time.monotonic()
            if self.rank == spec.fail_rank and now - started >= spec.fail_at:
                return "error", RuntimeError(f"simulated failure on rank {self.rank} at step {step}")
            loss = math.exp(-step / max(1, spec.steps) * 3) * (1 + 0.05 * math.sin(self.rank + step))
            client.post_progress({"t": C.PROGRESS, "step": step, "total": spec.steps,
                                  "metrics": {"loss": round(loss, 5)}, "at": time.time()})
            if spec.log_every and step % spec.log_every == 0:
                client.post_log("stdout", f"step {step}: loss {loss:.4f}\n", time.time())
            if now >= usage_due:
                client.post_usage({"t": C.USAGE, "rss": 200 << 20, "cpu_pct": 95.0, "at": time.time()})
                usage_due = now + 1.0
            time.sleep(max(0.0, started + step * spec.every - time.monotonic()))
        return "ok", {"rank": self.rank, "steps": spec.steps} if self.rank == 0 else None
