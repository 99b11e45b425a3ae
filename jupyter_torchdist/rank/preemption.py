"""Preemption: a rank's process told to go (SIGTERM: a spot instance reclaimed, a node drained or decommissioned,
``kill``) gets a notice and a grace period instead of dying mid-step.

On the first SIGTERM the rank says so to the kernel (``PREEMPTED``), which tells every rank of the run (``PREEMPT``):
``jupyter_torchdist.preempted()`` is then true on all of them, and the next ``jupyter_torchdist.commit`` of each
commits whatever its ``every`` (the state a restart resumes from). ``GRACE_S`` seconds after the notice the rank
ends as SIGTERM would have ended it; with ``--max-restarts`` the run then starts again from the last commit, as
after any rank killed from outside. A second SIGTERM ends it at once.

The grace is the rank's host's to say (``JUPYTER_TORCHDIST_PREEMPT_GRACE_S``, default 25 s: within Kubernetes'
default 30 s termination grace and a preemptible VM's 30 s notice; a spot reclaim's two minutes leave room for
more). A signal reaches Python between bytecodes: a rank blocked in one long C call (a huge collective) hears it
when the call returns.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from ..core import contract as C

__all__ = ["GRACE_S", "install", "noticed", "heard", "grace_s"]

GRACE_ENV: Final = "JUPYTER_TORCHDIST_PREEMPT_GRACE_S"
GRACE_S: Final = 25.0
LATE_S: Final = 5.0   # past the grace, a main thread that cannot take the signal (stuck in C) is killed this later

_notice = threading.Event()        # this run was told a rank must go
_told = threading.Event()          # this very process was told (SIGTERM)
_committed_under_notice = threading.Event()


def grace_s() -> float:
    """The grace this host gives a rank told to go (``JUPYTER_TORCHDIST_PREEMPT_GRACE_S``, else ``GRACE_S``)."""
    try:
        value = float(os.environ.get(GRACE_ENV, GRACE_S))
    except ValueError:
        return GRACE_S
    return value if 0.0 <= value <= 3600.0 else GRACE_S


def noticed() -> bool:
    """A rank of this run was told to go (this one by SIGTERM, or another as the kernel said)."""
    return _notice.is_set()


def heard(msg: C.PreemptMsg) -> None:
    """The kernel says a rank of the run was told to go (the link's thread)."""
    _notice.set()


def commit_is_due() -> bool:
    """Under notice, the first commit after it is made whatever its ``every``."""
    if _notice.is_set() and not _committed_under_notice.is_set():
        _committed_under_notice.set()
        return True
    return False


def install(post: Callable[[C.PreemptedMsg], None]) -> None:
    """Take SIGTERM on this (the main) thread: ``post`` says it to the kernel at once."""
    def on_sigterm(signum: int, frame: Any) -> None:
        if _told.is_set():
            _end()   # told twice: no more grace
        _told.set()
        _notice.set()
        grace = grace_s()
        try:
            post({"t": C.PREEMPTED, "grace_s": grace, "at": time.time()})
        finally:
            threading.Thread(target=_end_after, args=(grace,), name="jtd-preempted", daemon=True).start()

    signal.signal(signal.SIGTERM, on_sigterm)


def _end() -> None:
    """End as SIGTERM ends a process (the kernel reads the signal: a rank killed from outside, restartable). On the
    main thread (the signal handler's): only it may give SIGTERM its default back."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _end_after(grace: float) -> None:
    """The grace is over: SIGTERM again (its handler ends the process on the main thread); a main thread stuck in
    C that cannot run the handler is not waited for past ``LATE_S``."""
    time.sleep(grace)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(LATE_S)
    os.kill(os.getpid(), signal.SIGKILL)
