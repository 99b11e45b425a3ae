"""Process and resource accounting from /proc (test-side only): who is alive, who descends from whom, what leaked."""
from __future__ import annotations

import os
import threading
import time


def process_alive(pid: int) -> bool:
    """Running, not a zombie (a zombie has exited; only its parent's wait is missing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def all_gone(pids, within: float = 15.0) -> bool:
    """Poll (test-side only) until every pid has exited (zombies count as gone); False if ``within`` passed."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not any(process_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def descendants_of(me: int) -> set[int]:
    """Every live (non-zombie) descendant of process ``me``."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents[int(entry)] = int(fields[1])
    out: set[int] = set()
    frontier = {me}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - out
        out |= frontier
    return out


def children() -> set[int]:
    """Every live descendant process of this test process."""
    return descendants_of(os.getpid())


def _fd_targets() -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass  # the fd listing itself, closed meanwhile
    return out


def resource_counts() -> dict[str, int]:
    targets = _fd_targets()
    return {
        "threads": threading.active_count(),
        "fds": len(targets),
        "sockets": sum(1 for t in targets if t.startswith("socket:")),
        "children": len(children()),
    }
