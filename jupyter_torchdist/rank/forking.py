"""Fork one rank's process so that it cannot outlive its parent or leave children behind.

The child gets its own process group (so the whole tree can be killed at once) and the
parent-death signal (so it dies with the Spark task or zygote that forked it). The parent
waits on a pidfd, event-driven, alongside its socket to the kernel.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import traceback
from typing import Callable

__all__ = ["RankProcess", "fork_rank", "set_parent_death_signal", "describe_status"]

PR_SET_PDEATHSIG = 1


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to kill this process when the thread that forked it dies."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except Exception:
        pass


def describe_status(status: int) -> tuple[int | None, str | None]:
    """(exit code, signal name) from a wait status."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return None, signal.Signals(sig).name
        except ValueError:
            return None, f"signal {sig}"
    return os.WEXITSTATUS(status), None


class RankProcess:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.status: int | None = None
        try:
            self.pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.pidfd = None

    def fileno(self) -> int:
        """Readable once the process has exited (for select); -1 without pidfd support."""
        return self.pidfd if self.pidfd is not None else -1

    def poll(self) -> int | None:
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.status = status
        return self.status

    def wait(self) -> int:
        if self.status is None:
            _, self.status = os.waitpid(self.pid, 0)
        return self.status

    def kill_group(self, sig: int = signal.SIGKILL) -> None:
        """Kill the rank and everything it started (its process group)."""
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def fork_rank(body: Callable[[], int]) -> RankProcess:
    """Run ``body`` in a forked child that ends with ``os._exit`` (never unwinding into our caller)."""
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return RankProcess(pid)
    code = 70
    try:
        os.setpgid(0, 0)
        set_parent_death_signal()
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(code)
        code = body()
    except BaseException:
        try:
            traceback.print_exc()
        except BaseException:
            pass
    finally:
        os._exit(code)
