"""The ``--local`` process server ("zygote"): one per kernel, a fresh interpreter that imported torch once.

The kernel is never forked (it has threads and may have touched CUDA). Instead this long-lived
process forks an agent per rank (``rank.agent.run_agent``), which forks the rank itself: the same
two levels as a Spark Python worker, so warm runs start in well under a second. Killing the kernel
takes the zygote, its agents and their ranks with it (parent-death signals all the way down).

Why not multiprocessing's forkserver: it re-runs the caller's ``__main__`` script in every child
(a training script calling ``run(..., local=True)`` without an ``if __name__ == "__main__":``
guard would start itself again), and its children get the environment the server started with.
Here every run carries the kernel's current directory, ``sys.path`` and environment.
"""
from __future__ import annotations

import functools
import gc
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

from ..core.contract import RunPlan
from ..rank.forking import RankProcess, describe_status, fork_rank

__all__ = ["Zygote", "zygote_main", "get_zygote", "stop_zygote", "zygote_pid", "zygote_if_running"]

# The collector stays off until the imports are done (``rank.agent.preload``), ours included.
_BOOT = "import gc; gc.disable(); from jupyter_torchdist.launchers.local_server import zygote_main; zygote_main({fd})"


def _preload() -> None:
    """What every rank imports, imported once here: forked ranks start warm."""
    from ..rank import agent

    agent.preload()  # torch, torch.distributed, DDP and the modules DDP imports lazily, the rank runtime
    gc.freeze()      # out of the collector for good: ranks forked from here never walk (nor write) torch's objects
    gc.enable()


def _agent_body(close_fds: list[int], plan: RunPlan, rank: int, gpu: str | None, ctx: dict[str, Any]) -> int:
    """In the forked agent: take on the kernel's cwd, path and environment, then watch the rank."""
    from ..rank.agent import run_agent

    for fd in close_fds:
        try:
            os.close(fd)
        except OSError:
            pass
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()
    os.environ.update(ctx["env"])
    sys.path[:] = ctx["path"]
    try:
        os.chdir(ctx["cwd"])
    except OSError:
        pass  # the kernel's directory is gone: ranks run where the zygote started
    run_agent(plan, rank, gpu)
    return 0


def _kill_agent(proc: RankProcess) -> None:
    """SIGKILL the agent's rank group first (its children too), then the agent."""
    try:
        with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
            children = [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        children = []  # the rank still dies: its parent-death signal fires with the agent
    for child in children:
        try:
            os.killpg(child, signal.SIGKILL)
        except OSError:
            pass
    proc.kill_group()


def zygote_main(fd: int) -> None:
    """Serve the kernel on ``fd``: fork agents on "start", kill a run's agents on "kill", report exits."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts are the kernel's to handle, not ours
    conn = Connection(fd)
    try:
        _preload()
    except BaseException:
        conn.send(("fatal", traceback.format_exc()))
        return
    conn.send(("ready", ""))
    agents: dict[RankProcess, tuple[str, int]] = {}  # RankProcess -> (run key, rank)
    try:
        _serve(conn, fd, agents)
    except (EOFError, OSError):  # the kernel is gone: so is everything it started
        for proc in agents:
            _kill_agent(proc)
    os._exit(0)  # nothing to flush; skip tearing down torch's modules (seconds on a busy machine)


def _serve(conn: Connection, fd: int, agents: dict[RankProcess, tuple[str, int]]) -> None:
    while True:
        polling = any(p.fileno() < 0 for p in agents)  # no pidfd (old Linux): poll exits
        watched: list[Any] = [conn, *[p for p in agents if p.fileno() >= 0]]
        ready = wait(watched, timeout=0.05 if polling else None)
        for proc in [p for p in agents if p.poll() is not None]:
            key, rank = agents.pop(proc)
            code, sig = describe_status(proc.wait())
            proc.close()
            conn.send(("exit", key, rank, code, sig))
        if conn not in ready:
            continue
        msg = conn.recv()
        if msg[0] == "start":
            _, key, plan, assignments, ctx = msg
            for rank, gpu in assignments:
                close = [fd, *(p.fileno() for p in agents if p.fileno() >= 0)]
                agents[fork_rank(functools.partial(_agent_body, close, plan, rank, gpu, ctx))] = (key, rank)
        elif msg[0] == "kill":
            for proc, (key, _) in agents.items():
                if key == msg[1]:
                    _kill_agent(proc)


# -- the kernel's side ---------------------------------------------------------------------------------
class Zygote:
    """The kernel's handle on its zygote: a writer thread (sends never block a caller), a reader thread."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        with theirs:
            self.proc = subprocess.Popen([sys.executable, "-c", _BOOT.format(fd=theirs.fileno())],
                                         pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                         start_new_session=True)  # outside the kernel's process group
        self.conn = Connection(ours.detach())
        self._outbox: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._handlers: dict[str, Callable[[tuple[Any, ...]], None]] = {}
        self._lock = threading.Lock()
        self.dead: str | None = None
        self.ready = threading.Event()  # torch and the rank runtime imported: a run starts at once
        self.asked = False              # an explicit --local run used it (so it is kept when idle)
        self.started_at, self.ready_at = time.time(), 0.0  # where a new notebook's first seconds go
        self._fatal = ""
        threading.Thread(target=self._write, name="jtd-zygote-send", daemon=True).start()
        self._reader = threading.Thread(target=self._read, name="jtd-zygote-recv", daemon=True)
        self._reader.start()

    def register(self, key: str, handler: Callable[[tuple[Any, ...]], None]) -> bool:
        with self._lock:
            if self.dead is not None:
                return False
            self._handlers[key] = handler
            return True

    def forget(self, key: str) -> None:
        with self._lock:
            self._handlers.pop(key, None)

    def send(self, msg: tuple[Any, ...]) -> None:
        self._outbox.put(msg)

    def _write(self) -> None:
        while (msg := self._outbox.get()) is not None:
            try:
                self.conn.send(msg)
            except OSError:
                return  # the reader sees the end and tells every run

    def _read(self) -> None:
        while True:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                break
            if msg[0] == "fatal":
                self._fatal = msg[1]
                continue
            if msg[0] == "ready":
                self.ready_at = time.time()
                self.ready.set()
                continue
            with self._lock:
                handler = self._handlers.get(msg[1])
            if handler is not None:
                handler(msg)
        code = self.proc.wait()
        reason = (f"the local process server (pid {self.proc.pid}) exited with code {code}"
                  + (f" while importing torch:\n{self._fatal}" if self._fatal else ""))
        with self._lock:
            self.dead = reason
            handlers = list(self._handlers.values())
            self._handlers.clear()
        self.ready.set()  # nobody waits for a zygote that is gone
        self._outbox.put(None)
        self.conn.close()
        for handler in handlers:
            handler(("lost", "", reason))

    def busy(self) -> bool:
        """Ranks it forked are running (a run, or kept ranks)."""
        with self._lock:
            return bool(self._handlers)

    def close(self) -> None:
        """Stop the zygote (its agents and ranks die with it) and wait for it."""
        try:
            self.proc.kill()
        except OSError:
            pass
        self._reader.join()


_zygote: Zygote | None = None
_zygote_lock = threading.Lock()


def get_zygote() -> Zygote:
    global _zygote
    with _zygote_lock:
        if _zygote is None or _zygote.dead is not None:
            _zygote = Zygote()
        return _zygote


def zygote_pid() -> int | None:
    """The pid of this process's zygote, if one is running (for tests and diagnostics)."""
    z = _zygote
    return z.proc.pid if z is not None and z.dead is None else None


def zygote_if_running() -> Zygote | None:
    return _zygote if _zygote is not None and _zygote.dead is None else None


def stop_zygote() -> None:
    """Stop the zygote now (the next --local run starts a fresh one, paying torch's import again)."""
    global _zygote
    with _zygote_lock:
        z, _zygote = _zygote, None
    if z is not None:
        z.close()
