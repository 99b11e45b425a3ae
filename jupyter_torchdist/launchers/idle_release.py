"""What an idle notebook gives back, and brings back when it is used again.

Only what makes the next run fast goes, never what holds the notebook's state: the local process server (a Python
that imported torch, 250 MB) unless ranks run on it, and the embedded session's idle Python workers (each a fork of
Spark's daemon with its own few dozen MB) when no Spark job runs and no kept ranks hold the session's slots; the
JVM is asked to return its free heap. The embedded session itself, its daemon (so that a run after the release
forks warm workers again in well under a second) and every kept rank stay; the daemon, alone once its workers are
gone, gives back the clean file-backed pages no other process maps (about 60 MB of torch's libraries for a notebook
alone; little where other notebooks' daemons share them), read back from disk by the next run in about a tenth of a
second (``jupyter_torchdist._pages``). ``release`` says what went;
``rewarm`` brings it back in the background, as ``%load_ext`` and the first run would have.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Any

from . import spark_session
from .local_server import get_zygote, stop_zygote, zygote_if_running
from .spark_jobs import held_slots

__all__ = ["release", "rewarm", "Released"]


class Released:
    """What the last release gave back (so ``rewarm`` brings back only that)."""

    zygote = False
    workers = 0


def release() -> list[str]:
    """Give back what is idle now; what went, in words (empty: nothing was idle)."""
    gone: list[str] = []
    zygote = zygote_if_running()
    if zygote is not None and not zygote.busy():
        Released.zygote = zygote.asked  # brought back only for a notebook that runs --local
        stop_zygote()
        gone.append("the local process server")
    session = spark_session.embedded_session()
    if session is not None and not held_slots() and not _spark_busy(session):
        killed = _idle_workers_go(session)
        Released.workers += killed
        if killed:
            gone.append(f"{killed} idle Spark Python worker{'s' if killed != 1 else ''}")
            try:
                session.sparkContext._jvm.System.gc()  # the heap shrinks to what it holds (serial GC, free ratios)
            except Exception:
                pass
    return gone


def rewarm() -> None:
    """Bring back, in the background, what the last release gave back."""
    if Released.zygote:
        Released.zygote = False
        get_zygote()  # it imports torch on its own process; nothing waits for it here
    if Released.workers:
        Released.workers = 0
        spark_session.warm_workers()  # a few workers forked from the daemon, which stayed


def _spark_busy(session: Any) -> bool:
    try:
        return bool(session.sparkContext.statusTracker().getActiveJobsIds())
    except Exception:
        return True  # cannot tell: leave it


def _idle_workers_go(session: Any) -> int:
    """Stop the daemon's forked workers (no job runs: every one is idle). Spark passes over a pooled worker that has
    exited and forks a fresh one from the daemon, which stays (torch imported)."""
    jvm = getattr(getattr(session.sparkContext, "_gateway", None), "proc", None)
    daemons = _children(jvm.pid) if jvm is not None else []
    killed = 0
    for daemon in daemons:
        if spark_session.DAEMON_MODULE not in _cmdline(daemon):
            continue
        for worker in _children(daemon):
            try:
                os.kill(worker, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        _pages_back(daemon)
    return killed


def _pages_back(daemon: int, wait_s: float = 3.0) -> None:
    """Once the daemon's workers are gone (a page a worker still maps is kept), ask it to give its file pages back
    (``SIGUSR1``, handled by ``jupyter_torchdist._daemon``)."""
    deadline = time.monotonic() + wait_s
    while _children(daemon) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _catches(daemon, signal.SIGUSR1):  # not yet (still importing), the signal's default would end it
        try:
            os.kill(daemon, signal.SIGUSR1)
        except OSError:
            pass


def _catches(pid: int, signum: int) -> bool:
    """Whether ``pid`` has a handler installed for ``signum`` (``SigCgt`` in /proc)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError):
        pass
    return False


def _children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (from /proc; none where there is no /proc: then nothing is stopped)."""
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == str(pid) and fields[0] != "Z":
                out.append(int(entry))
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""

