"""The watcher beside each rank: forks it, kills it on the kernel's word, reports how it ended.

Runs inside a Spark task (or any launcher's worker). The exit is reported over the channel
even when the rank died too hard to say anything itself (os._exit, a segfault, the OOM killer).
"""
from __future__ import annotations

import functools
import gc
import os
import select
import signal
import socket
import threading
import time
from typing import Any, cast

from ..core import contract as C
from ..channel import protocol as P
from ..channel.handshake import Stream, connect
from ..core.contract import RunPlan
from ..core.travel import local_versions
from .forking import RankProcess, cuda_touched, describe_status, fork_rank, spawn_rank
from .main import rank_main

__all__ = ["run_agent", "run_agents"]


def _beat(sock: Stream, due: float) -> float:
    """Say BEAT when it is due (the kernel's proof that this host and its link are there); the next due time."""
    now = time.monotonic()
    if now < due:
        return due
    try:
        P.send_frame(sock, {"t": C.BEAT})
    except OSError:
        pass  # the kernel is gone: the socket's own end says so below
    return now + C.HEARTBEAT_S


def _wait(proc: Any, sock: Stream) -> bool:
    """Block until the rank exits; kill it if the kernel says stop or goes away. True if stopped."""
    stopped = False
    watch: list[Any] = [sock] + ([proc] if proc.fileno() >= 0 else [])
    due = time.monotonic() + C.HEARTBEAT_S
    while True:
        if proc.fileno() < 0 and proc.poll() is not None:
            return stopped
        left = max(0.0, due - time.monotonic())
        ready, _, _ = select.select(watch, [], [], left if proc.fileno() >= 0 else min(left, 0.05))
        due = _beat(sock, due) if sock in watch else due
        if proc in ready:
            return stopped
        if sock in ready:
            try:
                frame = P.recv_frame(sock, 1 << 16)
            except (EOFError, OSError, P.ProtocolError):
                frame = {"t": C.STOP, "reason": "the kernel is gone"}  # nobody will collect this rank's work
                watch.remove(sock)
            if isinstance(frame, dict):  # from the kernel: the handshake proved it holds the run's secret
                stopped = _obey(proc, cast("C.ToAgent", frame)) or stopped


def _obey(proc: Any, msg: C.ToAgent) -> bool:
    """Carry out the kernel's word to this agent; True if it said stop (the rank is killed)."""
    if msg["t"] == C.STOP:
        proc.kill_group()
        return True
    if msg["t"] == C.INTERRUPT:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGINT)  # kept ranks: KeyboardInterrupt in the cell's own code
    else:
        C.unhandled(msg)
    return False


def preload() -> None:
    """Import what every rank needs here, before forking: a reused worker then forks warm.

    ``torch._dynamo`` is what ``DistributedDataParallel`` (and every optimizer's ``step``) imports lazily (about 800
    modules). The collector is off meanwhile: the imports make a few hundred thousand objects and no garbage worth a
    pass, and the passes they set off took a third of the time (2.3 s with them, 1.9 s without, on 2 cores): this
    is the whole of a new notebook's wait for its first cell.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        import torch
        import torch.distributed
        import torch.nn.parallel  # noqa: F401

        from . import output, tqdm_bridge  # noqa: F401  (the rank runtime's own lazy imports)

        for optional in ("torch._dynamo", "tqdm.std", "tqdm.auto"):
            try:
                __import__(optional)
            except Exception:
                pass
        _warm_first_step()
        local_versions()  # each rank compares them with the kernel's: read from the packages' records once, here
    finally:
        if collecting:
            gc.enable()


_warmed = False


def _warm_first_step() -> None:
    """Take one training step here, on a throwaway model, so that every rank forked from this process skips what a
    first step sets up lazily (each ``torch._disable_dynamo`` function's wrapper on its first call, the optimizers'
    profiling hooks): 10-15 ms of a forked rank's first cell. Once per process; the random state is left as it was
    (a rank that does not seed draws what it would have). CPU-only torch builds only: elsewhere the first backward
    asks the GPU driver how many devices there are, and a process that did cannot fork ranks that use the GPU."""
    global _warmed
    import torch

    if _warmed or torch.version.cuda is not None or torch.version.hip is not None or \
            getattr(torch.version, "xpu", None) is not None:
        return
    _warmed = True
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(torch.initial_seed())
        model = torch.nn.Linear(2, 1)
        for opt in (torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.Adam(model.parameters())):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(torch.ones(1, 2)), torch.zeros(1, 1)).backward()  # type: ignore[no-untyped-call]
            opt.step()
    except Exception:
        pass  # a warm-up only: the ranks do the same themselves
    finally:
        torch.random.set_rng_state(state)


def _start_rank(plan: RunPlan, rank: int, gpu: str | None) -> RankProcess:
    """The rank's process: forked from this one (warm: its imports are done), or spawned when this process has
    initialised CUDA (a Spark Python worker that ran a GPU task before), since a child forked from it could not use
    the GPU ("Cannot re-initialize CUDA in forked subprocess")."""
    if cuda_touched():
        return spawn_rank((plan, rank, gpu))
    return fork_rank(functools.partial(rank_main, plan, rank, gpu))


def run_agent(plan: RunPlan, rank: int, gpu_address: str | None = None) -> C.ExitMsg:
    """Run rank ``rank`` in a child process and report its end. Returns how it ended."""
    preload()
    return _watch(plan, rank, _start_rank(plan, rank, gpu_address))


def run_agents(plan: RunPlan, placed: list[tuple[int, str | None]]) -> list[C.ExitMsg]:
    """Several ranks of one task (a Spark task that holds a GPU per rank): each forked here, one after another,
    then watched on a thread of its own as ``run_agent`` watches one. Returns how each ended, in order."""
    if len(placed) == 1:
        return [run_agent(plan, *placed[0])]
    preload()
    ends: list[C.ExitMsg | BaseException | None] = [None] * len(placed)

    def watch(i: int, rank: int, proc: Any) -> None:
        try:
            ends[i] = _watch(plan, rank, proc)
        except BaseException as exc:  # raised again below, on the task's own thread
            ends[i] = exc

    threads = [threading.Thread(target=watch, args=(i, rank, _start_rank(plan, rank, gpu)),
                                name=f"jtd-agent-{rank}", daemon=True)
               for i, (rank, gpu) in enumerate(placed)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for end in ends:
        if isinstance(end, BaseException):
            raise end
    return [cast("C.ExitMsg", end) for end in ends]


def _watch(plan: RunPlan, rank: int, proc: Any) -> C.ExitMsg:
    """Connect for the forked rank ``proc``, watch it to its end, report the end. Returns how it ended."""
    try:
        sock = connect(plan.address, plan.secret, rank, P.ROLE_AGENT, tls=plan.tls)
    except BaseException:
        proc.kill_group()
        proc.wait()
        proc.close()
        raise
    try:
        hello: C.AgentHelloMsg = {"t": C.AGENT_HELLO, "host": socket.gethostname(), "pid": os.getpid(),
                                  "child": proc.pid}
        P.send_frame(sock, hello)
        stopped = _wait(proc, sock)
        proc.kill_group()  # whatever the rank left running (its process group) goes with it
        code, sig = describe_status(proc.wait())
        end: C.ExitMsg = {"t": C.EXIT, "code": code, "signal": sig, "stopped": stopped, "at": time.time()}
        try:
            P.send_frame(sock, end)
        except OSError:
            pass
        return end
    finally:
        proc.close()
        sock.close()
