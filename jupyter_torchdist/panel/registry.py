"""The registry's format: one file per kernel, ``kernel-<kernel id>.json``, in the owner-only folder (``folder.py``).

A kernel's file says who wrote it (kernel id, pid, host, the notebook) and lists its runs and sweeps, each as a
``RunEntry`` (the API's list is these entries). The kernel rewrites it whole while its runs change (at most a few
times a second), at least every ``HEARTBEAT_S`` while it lives, and a last time with ``ended`` set when it exits.
A kernel that died without that last write (killed, its machine gone) is told by its pid, or by a heartbeat older
than ``STALE_S``: its runs that had not ended show as ``lost``. Files of kernels gone longer than ``KEEP_S`` are
removed by the next kernel or server that looks.

Beside each file: ``kernel-<id>.asks/`` (requests to the kernel: ``asks.py``) and ``kernel-<id>.reports/`` (the
reports of its runs, ``run-<n>.json`` / ``sweep-<n>.json``: a run snapshot, as the notebook's report holds it).
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import time
from pathlib import Path
from typing import Any, Final, TypedDict

from .folder import read_json, remove

__all__ = ["FORMAT", "VERSION", "RunEntry", "KernelRecord", "ENDED", "HEARTBEAT_S", "STALE_S", "KEEP_S",
           "kernel_file", "asks_dir", "reports_dir", "read_records", "kernel_state", "clean", "check_kernel_id",
           "short_id"]

FORMAT: Final = "jupyter-torchdist-runs"
VERSION: Final = 1
ENDED: Final = ("done", "failed", "stopped", "stopped_early", "lost")
HEARTBEAT_S: Final = 30.0     # a living kernel rewrites its file at least this often
STALE_S: Final = 300.0        # ... so a file this much older than that is a dead kernel's (a reused pid, another host)
KEEP_S: Final = 24 * 3600.0   # an ended kernel's file (``runs --all``) is kept this long after its end
_KERNEL_ID: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_FILE: Final = re.compile(r"^kernel-(.+)\.json$")


class RunEntry(TypedDict, total=False):
    """One run (``kind`` "run") or sweep (``kind`` "sweep") as the API lists it and the panel draws it."""
    kind: str                 # "run" or "sweep"
    id: str                   # "<first 8 of the kernel id>-<run number>" ("-s<n>" for a sweep): unique per user
    number: int               # the kernel's own number for it (jupyter_torchdist.runs(); a sweep's count)
    kernel_id: str
    notebook: str | None      # the notebook's path, relative to the server's root (None: not from a notebook)
    cell_id: str | None       # the cell that started it (JupyterLab's cell id), when the front end said
    cell: str                 # the cell's first line ("%%distribute -n 2 --background")
    background: bool
    sweep: str | None         # the sweep it is a member of (that sweep's id)
    params: str | None        # a sweep member's combination ("lr=0.1, width=64")
    backend: str | None       # "spark", "local", ... (None until known)
    where: str | None         # the backend as the view says it ("Spark local[4]", "local processes")
    ranks: int
    hosts: list[str]          # the first few hosts its ranks run on
    host_count: int
    state: str                # queued, starting, running, stopping, done, failed, stopped, stopped_early, lost (its
                              # kernel is gone)
    status: str | None        # the view's own status (starting, stopping, succeeded, interrupted, timeout, ...)
    step: float | None        # rank 0's step (the median rank's in a many-rank run); a sweep: members finished
    total: float | None
    rate: float | None        # steps per second
    metric: dict[str, Any] | None   # {"name": "loss", "value": 0.12}: the latest reported loss, else first metric
    submitted: float          # times: seconds since the epoch
    started: float | None
    ended: float | None
    outcome: str | None       # the value's or the error's first line (a queued run: what it waits for)
    links: list[dict[str, str]]     # {"kind": "mlflow" | "spark" | "tensorboard", "label", "url" or "path"}
    report: str | None        # the saved report's file, once written
    members: list[str]        # a sweep: its runs' ids
    counts: dict[str, int]    # a sweep: members by state


class KernelRecord(TypedDict):
    """A kernel's file."""
    format: str
    version: int
    kernel_id: str
    pid: int
    host: str
    notebook: str | None
    started: float
    updated: float
    ended: float | None
    entries: list[RunEntry]


def check_kernel_id(kernel_id: str) -> str:
    """A kernel id fit for a file name (Jupyter's are UUIDs); ``ValueError`` otherwise."""
    if not _KERNEL_ID.match(kernel_id):
        raise ValueError(f"not a kernel id: {kernel_id!r}")
    return kernel_id


def short_id(kernel_id: str) -> str:
    return kernel_id.replace("-", "")[:8]


def kernel_file(folder: Path, kernel_id: str) -> Path:
    return folder / f"kernel-{check_kernel_id(kernel_id)}.json"


def asks_dir(folder: Path, kernel_id: str) -> Path:
    return folder / f"kernel-{check_kernel_id(kernel_id)}.asks"


def reports_dir(folder: Path, kernel_id: str) -> Path:
    return folder / f"kernel-{check_kernel_id(kernel_id)}.reports"


def _valid(value: Any) -> bool:
    return (isinstance(value, dict) and value.get("format") == FORMAT and value.get("version") == VERSION
            and isinstance(value.get("kernel_id"), str) and isinstance(value.get("entries"), list)
            and isinstance(value.get("pid"), int) and isinstance(value.get("updated"), (int, float)))


def read_records(folder: Path) -> list[KernelRecord]:
    """Every kernel's file in ``folder`` that is of this format (others, torn or foreign files, are skipped)."""
    out: list[KernelRecord] = []
    try:
        names = sorted(e.name for e in os.scandir(folder) if _FILE.match(e.name) and e.is_file(follow_symlinks=False))
    except FileNotFoundError:
        return out
    for name in names:
        value = read_json(folder / name)
        if _valid(value):
            value["entries"] = [e for e in value["entries"] if isinstance(e, dict) and isinstance(e.get("id"), str)]
            out.append(value)
    return out


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True   # a process of another user has that pid now: ours is gone, the heartbeat will tell
    except OSError:
        return False
    return True


def kernel_state(record: KernelRecord, now: float | None = None) -> str:
    """"live", "ended" (it wrote its last file) or "gone" (it died without: its pid, or its silence, says so)."""
    if record.get("ended") is not None:
        return "ended"
    now = time.time() if now is None else now
    if now - float(record["updated"]) > STALE_S:
        return "gone"
    if record.get("host") == socket.gethostname() and not _pid_alive(int(record["pid"])):
        return "gone"
    return "live"


def clean(folder: Path, now: float | None = None) -> int:
    """Remove the files (and asks and reports) of kernels that ended or died more than ``KEEP_S`` ago; how many."""
    now = time.time() if now is None else now
    removed = 0
    for record in read_records(folder):
        state = kernel_state(record, now)
        last = float(record.get("ended") or record["updated"])
        if state != "live" and now - last > KEEP_S:
            kernel_id = record["kernel_id"]
            try:
                remove(kernel_file(folder, kernel_id))
                for sub in (asks_dir(folder, kernel_id), reports_dir(folder, kernel_id)):
                    shutil.rmtree(sub, ignore_errors=True)
            except ValueError:
                continue
            removed += 1
    return removed
