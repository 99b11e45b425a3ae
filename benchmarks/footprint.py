"""What a notebook holds in memory: the PSS (shared pages split between their users) of a kernel and every process it
started, by kind. Read from /proc (``smaps_rollup``); used by bench_footprint.py."""
from __future__ import annotations

from collections.abc import Iterable

from common import descendants  # benchmarks/ is on sys.path for every benchmark


def pss_kb(pid: int) -> int:
    """One process's proportional set size in KB (0 when it is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def kind(pid: int) -> str:
    """jvm, spark python (the daemon and its workers), process server, or other."""
    cmd = _cmdline(pid)
    if "java" in cmd.split(" ")[0] or "org.apache.spark" in cmd:
        return "jvm"
    if "pyspark" in cmd or "jupyter_torchdist._daemon" in cmd:
        return "spark python"
    if "local_server" in cmd or "zygote_main" in cmd:
        return "process server"
    return "other"


def footprint_mb(kernel_pid: int, extra: Iterable[int] = ()) -> dict[str, float]:
    """MB of PSS by kind for the kernel and its descendants: kernel, jvm, spark python, process server, other,
    and total."""
    out = {"kernel": pss_kb(kernel_pid) / 1024.0, "jvm": 0.0, "spark python": 0.0, "process server": 0.0,
           "other": 0.0}
    for pid in descendants(kernel_pid) | set(extra):
        out[kind(pid)] += pss_kb(pid) / 1024.0
    out["total"] = sum(v for k, v in out.items())
    return {k: round(v, 1) for k, v in out.items()}
