"""Fork one rank's process so that it cannot outlive its parent or leave children behind.

The child gets its own process group (so the whole tree can be killed at once) and the
parent-death signal (so it dies with the Spark task or zygote that forked it). The parent
waits on a pidfd, event-driven, alongside its socket to the kernel.

A process that has initialised CUDA cannot be forked from: the child fails at its first CUDA call ("Cannot
re-initialize CUDA in forked subprocess"). A Spark Python worker is reused from task to task, so one that ran a GPU
UDF before has; its ranks are spawned instead (``spawn_rank``: a fresh Python, the same guarantees, a few seconds
more for its imports).
"""
from __future__ import annotations

import ctypes
import os
import pickle
import signal
import sys
import traceback
from typing import Any
from typing import Callable, NoReturn

__all__ = ["RankProcess", "fork_rank", "set_parent_death_signal", "describe_status", "cuda_touched", "spawn_rank",
           "child_runs"]

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
    child_runs(parent, body, own_group=True)


def child_runs(parent: int, body: Callable[[], int], own_group: bool = False) -> NoReturn:
    """A rank's child process, forked or spawned, from start to end: in a process group of its own if asked, dying
    with ``parent`` (gone already: it ends at once), then ``body``, its traceback if it raised, and ``os._exit`` with
    ``body``'s code (70 when it did not return one), its output flushed."""
    code = 70
    try:
        if own_group:
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
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def cuda_touched() -> bool:
    """Whether this process has initialised CUDA (a child forked from it could not use the GPU). Asking touches
    nothing: torch is not imported when it is not loaded, and ``is_initialized`` does not initialise."""
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:
        return False


def spawn_rank(args: tuple[Any, ...]) -> RankProcess:
    """Start ``rank_main(*args)`` in a fresh Python (``rank/spawned.py``) with what ``fork_rank`` gives a forked one:
    its own process group, the parent-death signal, ``os._exit`` with the rank's code. The arguments (the run's
    plan, its secret among them) go through a pipe on its stdin, never its command line."""
    read_fd, write_fd = os.pipe()
    try:
        pid = os.posix_spawn(sys.executable, [sys.executable, "-m", "jupyter_torchdist.rank.forking"], os.environ,
                             file_actions=[(os.POSIX_SPAWN_DUP2, read_fd, 0)], setpgroup=0)
    finally:
        os.close(read_fd)
    child = RankProcess(pid)
    try:
        with os.fdopen(write_fd, "wb") as pipe:
            pickle.dump((os.getpid(), args), pipe, protocol=pickle.HIGHEST_PROTOCOL)
    except BrokenPipeError:
        pass  # the child died before reading: its exit says so
    return child


# -- a rank in a fresh Python ------------------------------------------------------------------------------------------
# A rank in a fresh Python (``forking.spawn_rank``): read its arguments from stdin, then run it as a forked one.
#
# Used where the parent cannot fork a rank that uses the GPU: a Spark Python worker that initialised CUDA for an
# earlier task. The child arms the parent-death signal first and ends with ``os._exit``, as ``forking.fork_rank``'s do.
def main() -> None:
    try:
        parent, args = pickle.load(sys.stdin.buffer)
    except BaseException:
        traceback.print_exc()
        os._exit(70)

    def body(args: tuple[Any, ...] = args) -> int:
        fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(fd, 0)  # the pipe is spent; the rank's stdin is nothing, as a Spark task's is
        os.close(fd)
        from .main import rank_main

        return rank_main(*args)

    child_runs(parent, body)


if __name__ == "__main__":
    main()
