"""What an idle notebook gives back, and brings back when it is used again.

Only what makes the next run fast goes, never what holds the notebook's state: the local process server (a Python
that imported torch, 250 MB) unless ranks run on it, and the embedded session's idle Python workers (each a fork of
Spark's daemon with its own few dozen MB) when no kept ranks hold the session's slots; the JVM is asked to return its
free heap. Workers go only the way Spark closes them itself: Spark stops the workers idle in its pool a minute after
its last Python task (under the lock it hands workers out with, so a task never gets a closed one); the release asks
it to do so at its next check, ten seconds at most, by marking its last activity long past. Where Spark cannot be
asked, its own minute does it. The embedded session itself, its daemon (so that a run after the release forks warm
workers again in well under a second) and every kept rank stay; the daemon, alone once its workers are gone, gives
back the clean file-backed pages no other process maps (about 60 MB of torch's libraries for a notebook alone; little
where other notebooks' daemons share them), read back from disk by the next run in about a tenth of a second
(``jupyter_torchdist.launchers.session.daemon``). ``release`` says what went; ``rewarm`` brings it back in the
background, as ``%load_ext`` and the first run would have.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Any

from . import embedded as spark_session
from ..local_server import get_zygote, stop_zygote, zygote_if_running
from ..spark_jobs import held_slots

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
        closed = _idle_workers_go(session)
        Released.workers += closed
        if closed:
            gone.append(f"{closed} idle Spark Python worker{'s' if closed != 1 else ''}")
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


def _idle_workers_go(session: Any, wait_s: float = 15.0) -> int:
    """Ask Spark to close its idle Python workers now (``_ask_spark``) and wait for it (its check runs every ten
    seconds); then each daemon left alone gives its pages back. Returns how many workers went."""
    jvm = getattr(getattr(session.sparkContext, "_gateway", None), "proc", None)
    daemons = [d for d in (_children(jvm.pid) if jvm is not None else [])
               if spark_session.DAEMON_MODULE in _cmdline(d)]
    before = sum(len(_children(d)) for d in daemons)
    if before:
        _ask_spark(session)
        deadline = time.monotonic() + wait_s
        while any(_children(d) for d in daemons) and time.monotonic() < deadline:
            time.sleep(0.2)
    for daemon in daemons:
        if not _children(daemon):
            _pages_back(daemon)
    return before - sum(len(_children(d)) for d in daemons)


def _ask_spark(session: Any) -> bool:
    """Mark each of the JVM's Python worker factories idle since long ago, so that Spark's own monitor closes their
    idle workers at its next check (under the factory's lock: a task taking a worker meanwhile keeps it, and its
    activity cancels the close). Spark's internals: where they differ, nothing is asked and Spark's own minute
    of idleness does it. True when asked."""
    try:
        jvm = session.sparkContext._jvm
        env = session.sparkContext._jsc.sc().env()
        field = jvm.java.lang.Class.forName("org.apache.spark.SparkEnv").getDeclaredField("pythonWorkers")
        field.setAccessible(True)
        factories = field.get(env).valuesIterator()  # a Scala iterator: hasNext and next, on Scala 2.12 and 2.13
        while factories.hasNext():
            getattr(factories.next(), "org$apache$spark$api$python$PythonWorkerFactory$$lastActivityNs_$eq")(0)
        return True
    except Exception:
        return False


def _pages_back(daemon: int) -> None:
    """The daemon's workers are gone (a page a worker still maps is kept): ask it to give its file pages back
    (``SIGUSR1``, handled by ``jupyter_torchdist._daemon``)."""
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

