"""Simulated ranks, for tests and benchmarks at scales this machine cannot hold as real ranks (1,024 to 4,096).

A simulated rank runs none of the cell's code and no torch. It speaks the real channel protocol as a real rank and
its agent do (the handshake with the run's secret, TLS when the run has it, HELLO and RENDEZVOUS, the rank's own
sender with its budgets, BEATs, EXIT), so everything on the kernel's side runs as it would: the channel server, the
supervisor, the state, the views and the report. Many ranks share a process, ``PER_PROCESS`` of them, driven by one
loop (each rank's own sender thread aside): a thread per rank would spend this 2-core machine's CPU on its own
scheduling and starve the kernel it is meant to measure.

Chosen when ``JUPYTER_TORCHDIST_SIMULATE`` is set in the kernel's environment, to what the ranks should do, e.g.
``steps=100,every=0.1,log_every=10,hosts=64,fail_rank=17,fail_at=3``: each rank reports progress (and a loss) every
``every`` seconds for ``steps`` steps, a log line every ``log_every`` steps, a usage sample every second; ranks
are spread over ``hosts`` simulated host names; ``fail_rank`` raises at ``fail_at`` seconds. Rank 0's value is
``{"rank": 0, "steps": steps}``. With ``tasks=T`` the ranks run inside T Spark barrier tasks of the notebook's session
instead (``simulated_spark``: the Spark launcher's path at scale). Nothing registers it but the tests and benchmarks
that use it (``enable``): a user's kernel never runs simulated ranks, whatever its environment says.
"""
from __future__ import annotations

import math
import os
import queue
import selectors
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Final

import cloudpickle

from jupyter_torchdist.core import contract as C
from jupyter_torchdist.core.contract import Inbound, LaunchInfo, RunPlan
from jupyter_torchdist.core.errors import LaunchError
from jupyter_torchdist.core.options import RunOptions
from jupyter_torchdist.launchers.base import Capacity, Launcher

__all__ = ["SimulatedLauncher", "SimSpec", "SIMULATE_ENV", "requested", "enable", "disable", "PER_PROCESS"]

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
    tasks: int = 0              # >0: the ranks run inside this many Spark barrier tasks (simulated_spark.py)

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


def enable() -> None:
    """Register the simulated backend above every other (tests and benchmarks only): from then on a run goes to
    simulated ranks whenever ``JUPYTER_TORCHDIST_SIMULATE`` is set in this process's environment."""
    from jupyter_torchdist.launchers.base import register

    # Spark tasks cannot import the tests package: what they run of this module travels by value
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    register("simulated", "tests.support.simulated:SimulatedLauncher", requested, priority=1000)


def disable() -> None:
    from jupyter_torchdist.launchers.base import unregister

    unregister("simulated")


_ROOT = str(Path(__file__).resolve().parents[2])   # the checkout: the workers import this module from its tests/
_WORKER = (f"import sys, cloudpickle\nsys.path.insert(0, {_ROOT!r})\n"
           "from tests.support.simulated import serve\n"
           "serve(*cloudpickle.load(sys.stdin.buffer))\n")


class SimulatedLauncher(Launcher):
    """Simulated ranks in ``ceil(N / PER_PROCESS)`` processes on this machine, over loopback."""

    name = "simulated"

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[bytes]] = []
        self._spec = SimSpec()
        self._spark: Launcher | None = None   # tasks=T: the ranks are Spark barrier tasks' (simulated_spark.py)

    def prepare(self, options: RunOptions) -> LaunchInfo:
        self._spec = SimSpec.parse(os.environ.get(SIMULATE_ENV, ""))
        if self._spec.tasks > 0:
            from .simulated_spark import SimulatedSparkLauncher

            self._spark = SimulatedSparkLauncher(self._spec, serve)
            return self._spark.prepare(options)
        return LaunchInfo(label=f"simulated ranks ({self._spec.hosts} hosts)", channel_host="127.0.0.1",
                          loopback=True, watcher="the simulated agent")

    def start(self, plan: RunPlan, inbox: queue.SimpleQueue[Inbound]) -> None:
        if self._spark is not None:
            self._spark.start(plan, inbox)
            return
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
        if self._spark is not None:
            self._spark.cancel()
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()

    def capacity(self) -> Capacity:
        return Capacity(slots=None, default_ranks=2, where="simulated ranks on this machine")


# -- the simulated ranks' side (in the worker processes) ----------------------------------------------------------
def serve(plan: RunPlan, ranks: list[int], spec: SimSpec) -> None:
    """Run ``ranks`` until every one has ended."""
    _Host(plan, ranks, spec).run()


def _place(rank: int) -> C.PlaceMsg:
    """Where a simulated rank says it is when asked: most wait in all_reduce, every fourth is still computing."""
    computing = rank % 4 == 3
    frame: C.FrameInfo = {"where": "cell line 3" if computing else "cell line 5", "name": "<module>",
                          "code": "time.sleep(0.1)" if computing else "dist.all_reduce(t)",
                          "call": "time.sleep" if computing else "dist.all_reduce", "library": 0}
    return {"t": C.PLACE, "frames": [frame], "collective": None if computing else "all_reduce",
            "waited_s": None if computing else 0.05, "at": time.time()}


class _Sim:
    """One simulated rank and its agent: two authenticated connections, as a real rank's process and its agent hold."""

    def __init__(self, rank: int, host: str) -> None:
        self.rank, self.host = rank, host
        self.agent: Any = None
        self.sock: Any = None
        self.client: Any = None
        self.stopped = False      # its agent was told to stop it (it is then gone, as a killed rank is)
        self.released = False     # the kernel let it exit
        self.outcome: tuple[str, Any] | None = None
        self.exited = False


class _Host:
    """The ranks of one worker process, in one loop: connect, wait for the rendezvous, train, end."""

    def __init__(self, plan: RunPlan, ranks: list[int], spec: SimSpec) -> None:
        self.plan, self.spec = plan, spec
        self.sims = [_Sim(r, f"sim-{r * spec.hosts // max(1, plan.world_size):03d}") for r in ranks]
        self.sel = selectors.DefaultSelector()
        self.beat_due = 0.0

    def run(self) -> None:
        from jupyter_torchdist.channel import protocol as P

        try:
            for sim in self.sims:
                self._connect(sim, P)
            self._rendezvous(P)
            self._train(P)
            self._stay(P)
        finally:
            for sim in self.sims:
                self._exit(sim, P, 1)

    def _connect(self, sim: _Sim, P: Any) -> None:
        from jupyter_torchdist.channel.handshake import connect

        plan = self.plan
        sim.agent = connect(plan.address, plan.secret, sim.rank, P.ROLE_AGENT, tls=plan.tls, timeout=120)
        P.send_frame(sim.agent, {"t": C.AGENT_HELLO, "host": sim.host, "pid": os.getpid(), "child": os.getpid()})
        self.sel.register(sim.agent, selectors.EVENT_READ, (sim, "agent"))
        sim.sock = connect(plan.address, plan.secret, sim.rank, P.ROLE_RANK, tls=plan.tls, timeout=120)
        hello: dict[str, Any] = {"t": C.HELLO, "host": sim.host, "ip": "127.0.0.1", "pid": os.getpid()}
        if sim.rank == 0:
            hello["store_port"] = 1  # no store: nothing dials it
        P.send_frame(sim.sock, hello)
        self.sel.register(sim.sock, selectors.EVENT_READ, (sim, "rank"))
        self._beat(P)

    def _beat(self, P: Any) -> None:
        """Every live agent beats when due (a real agent beats from its own process whatever its rank does)."""
        now = time.monotonic()
        if now < self.beat_due:
            return
        self.beat_due = now + C.HEARTBEAT_S
        for sim in self.sims:
            if sim.agent is not None and not sim.exited:
                try:
                    P.send_frame(sim.agent, {"t": C.BEAT})
                except OSError:
                    pass

    def _poll(self, P: Any, timeout: float) -> list[tuple[_Sim, dict[str, Any]]]:
        """What the kernel sent the ranks and agents within ``timeout``; a STOP marks its rank stopped."""
        said = []
        for key, _ in self.sel.select(timeout):
            sim, role = key.data
            conn = sim.agent if role == "agent" else sim.sock
            try:
                msg = P.recv_frame(conn, 1 << 20)
            except (EOFError, OSError, P.ProtocolError):
                self.sel.unregister(conn)
                continue
            if not isinstance(msg, dict):
                continue
            if role == "agent" and msg.get("t") == C.STOP:  # a real agent kills its rank and says so at once
                sim.stopped = True
                self._exit(sim, P, 1)
            elif role == "rank" and msg.get("t") == C.WHERE and sim.client is not None:
                sim.client.post(_place(sim.rank), urgent=True)
            said.append((sim, msg))
        self._beat(P)
        return said

    def _rendezvous(self, P: Any) -> None:
        from jupyter_torchdist.rank.client import RankClient

        waiting = {sim.rank for sim in self.sims}
        while waiting and not all(sim.stopped for sim in self.sims):
            for sim, msg in self._poll(P, 0.2):
                if msg.get("t") == C.RENDEZVOUS and sim.rank in waiting:
                    waiting.discard(sim.rank)
                    sim.client = RankClient(sim.sock, self.plan.world_size)
                    sim.client.post({"t": C.STATE, "state": "starting"})
                    sim.client.post({"t": C.STATE, "state": "running"})

    def _train(self, P: Any) -> None:
        spec, started = self.spec, time.monotonic()
        usage_due = started
        for step in range(1, spec.steps + 1):
            if all(sim.stopped or sim.outcome is not None or sim.client is None for sim in self.sims):
                break
            now = time.monotonic()
            usage = now >= usage_due
            usage_due = now + 1.0 if usage else usage_due
            for sim in self.sims:
                if sim.client is not None and sim.outcome is None and not sim.stopped:
                    self._step(sim, step, now - started, usage)
            self._poll(P, max(0.0, started + step * spec.every - time.monotonic()))
        for sim in self.sims:
            if sim.client is not None and sim.outcome is None and not sim.stopped:
                self._end(sim, ("ok", {"rank": sim.rank, "steps": spec.steps} if sim.rank == 0 else None))

    def _step(self, sim: _Sim, step: int, seconds: float, usage: bool) -> None:
        spec, client = self.spec, sim.client
        if sim.rank == spec.fail_rank and seconds >= spec.fail_at:
            self._end(sim, ("error", RuntimeError(f"simulated failure on rank {sim.rank} at step {step}")))
            return
        loss = math.exp(-step / max(1, spec.steps) * 3) * (1 + 0.05 * math.sin(sim.rank + step))
        client.post_progress({"t": C.PROGRESS, "step": step, "total": spec.steps,
                              "metrics": {"loss": round(loss, 5)}, "at": time.time()})
        if spec.log_every and step % spec.log_every == 0:
            client.post_log("stdout", f"step {step}: loss {loss:.4f}\n", time.time())
        if usage:
            client.post_usage({"t": C.USAGE, "rss": 200 << 20, "cpu_pct": 95.0, "at": time.time()})

    def _end(self, sim: _Sim, outcome: tuple[str, Any]) -> None:
        from jupyter_torchdist.rank.values import final_message

        sim.outcome = outcome
        kind, value = outcome
        final = final_message(kind, value, filename="<simulated>", send_value=sim.rank == 0,
                              max_bytes=self.plan.max_value_bytes)
        sim.client.send_final([final], timeout=30)

    def _stay(self, P: Any) -> None:
        """Every rank stays until the kernel releases it (or stops it), then its agent says how it exited."""
        while not all(sim.released or sim.stopped or sim.client is None for sim in self.sims):
            for sim, msg in self._poll(P, 0.2):
                if msg.get("t") == C.RELEASE:
                    sim.released = True
            for sim in self.sims:
                if sim.released or sim.stopped:
                    code = 0 if sim.outcome is not None and sim.outcome[0] == "ok" and not sim.stopped else 1
                    self._exit(sim, P, code)

    def _exit(self, sim: _Sim, P: Any, code: int) -> None:
        if sim.exited:
            return
        sim.exited = True
        if sim.client is not None:
            sim.client.close()
        for conn in (sim.sock, sim.agent):
            if conn is not None:
                try:
                    self.sel.unregister(conn)
                except (KeyError, ValueError):
                    pass
        try:
            if sim.agent is not None:
                P.send_frame(sim.agent, {"t": C.EXIT, "code": None if sim.stopped else code,
                                         "signal": "SIGKILL" if sim.stopped else None, "stopped": sim.stopped,
                                         "at": time.time()})
                sim.agent.close()
            if sim.sock is not None:
                sim.sock.close()
        except OSError:
            pass
