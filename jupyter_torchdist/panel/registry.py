"""The registry's format: one file per kernel, ``kernel-<kernel id>.json``, in the owner-only folder (``folder.py``).

A kernel's file says who wrote it (kernel id, pid, host, the notebook) and lists its runs and sweeps, each as a
``RunEntry`` (the API's list is these entries). The kernel rewrites it whole while its runs change (at most a few
times a second), at least every ``HEARTBEAT_S`` while it lives, and a last time with ``ended`` set when it exits.
A kernel that died without that last write (killed, its machine gone) is told by its pid, or by a heartbeat older
than ``STALE_S``: its runs that had not ended show as ``lost``. Files of kernels gone longer than ``KEEP_S`` are
removed by the next kernel or server that looks.

A reader trusts no file further than its fields' types: a record or an entry is taken field by field (``_record``,
``_entry``: a field of the wrong type is dropped, an entry without a usable id or a record without a usable pid is
skipped), so one malformed file (written by an older version, by hand, or by someone else) costs only itself, never
the list, a report, a stop or ``%load_ext``. A link is kept only when it is an ``http(s)`` address.

Beside each file: ``kernel-<id>.asks/`` (requests to the kernel: ``asks.py``) and ``kernel-<id>.reports/`` (the
reports of its runs, ``run-<n>.json`` / ``sweep-<n>.json``: a run snapshot, as the notebook's report holds it).
"""
from __future__ import annotations

import math
import os
import re
import socket
import time
from pathlib import Path
from typing import Any, Final, TypedDict

from ..core.held_folder import Held

__all__ = ["FORMAT", "VERSION", "RunEntry", "KernelRecord", "ENDED", "HEARTBEAT_S", "STALE_S", "KEEP_S",
           "kernel_file", "asks_dir", "reports_dir", "read_records", "kernel_state", "clean", "check_kernel_id",
           "RUN_ID"]

FORMAT: Final = "jupyter-torchdist-runs"
VERSION: Final = 1
ENDED: Final = ("done", "failed", "stopped", "stopped_early", "lost")
STATES: Final = ("queued", "starting", "running", "stopping", *ENDED)
HEARTBEAT_S: Final = 30.0     # a living kernel rewrites its file at least this often
STALE_S: Final = 300.0        # ... so a file this much older than that is a dead kernel's (a reused pid, another host)
KEEP_S: Final = 24 * 3600.0   # an ended kernel's file (``runs --all``) is kept this long after its end
_KERNEL_ID: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_FILE: Final = re.compile(r"^kernel-(.+)\.json$")
RUN_ID: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")   # a run's or sweep's id (a file name too)
_TEXT_MAX: Final = 2000
_LIST_MAX: Final = 10_000


class RunEntry(TypedDict, total=False):
    """One run (``kind`` "run") or sweep (``kind`` "sweep") as the API lists it and the panel draws it."""
    kind: str                 # "run" or "sweep"
    id: str                   # the run's (or sweep's) durable id (run.id): 12 random hex digits, never reused
    number: int               # the kernel's own number for it (jupyter_torchdist.runs(); a sweep's count)
    kernel_id: str
    notebook: str | None      # the notebook's path, relative to the server's root (None: not from a notebook)
    cell_id: str | None       # the cell that started it (JupyterLab's cell id), when the front end said
    cell: str                 # the cell's first line ("%%distribute -n 2 --background")
    background: bool
    detached: bool            # a detached run's (--detach): its runner holds it, no kernel does (``kernel_id`` names
                              # the runner: "detached-<id>"); a kernel attaches with %distribute_attach ID
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


def kernel_file(folder: Path, kernel_id: str) -> Path:
    return folder / f"kernel-{check_kernel_id(kernel_id)}.json"


def asks_dir(folder: Path, kernel_id: str) -> Path:
    return folder / f"kernel-{check_kernel_id(kernel_id)}.asks"


def reports_dir(folder: Path, kernel_id: str) -> Path:
    return folder / f"kernel-{check_kernel_id(kernel_id)}.reports"


def _text(value: Any) -> str | None:
    return value[:_TEXT_MAX] if isinstance(value, str) else None


def _real(value: Any) -> float | None:
    """A finite number (never a bool), as a float; None otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:   # an int past a float's range
        return None
    return number if math.isfinite(number) else None


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**53 else None


def _metric(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    number = value.get("value")
    shown = number if isinstance(number, str) and number in ("nan", "inf", "-inf") else _real(number)
    return {"name": value["name"][:200], "value": shown}


def _link(value: Any) -> dict[str, str] | None:
    """A link the panel may draw: a web address (http or https: never ``javascript:``, ``data:`` ...), or a path."""
    if not isinstance(value, dict) or not isinstance(value.get("label"), str):
        return None
    link = {"kind": _text(value.get("kind")) or "", "label": value["label"][:200]}
    url, path = value.get("url"), value.get("path")
    if isinstance(url, str) and re.match(r"^https?://[^\s]+$", url, re.I) and len(url) <= _TEXT_MAX:
        link["url"] = url
    elif isinstance(path, str):
        link["path"] = path[:_TEXT_MAX]
    else:
        return None
    return link


_FIELDS: Final[dict[str, Any]] = {
    **dict.fromkeys(("kernel_id", "notebook", "cell_id", "cell", "sweep", "params", "backend", "where", "status",
                     "outcome", "report"), _text),
    **dict.fromkeys(("step", "total", "rate", "submitted", "started", "ended"), _real),
    **dict.fromkeys(("ranks", "host_count"), _whole),
    **dict.fromkeys(("background", "detached"), lambda v: v if isinstance(v, bool) else None),
    "metric": _metric,
    "hosts": lambda v: [h[:200] for h in v[:_LIST_MAX] if isinstance(h, str)] if isinstance(v, list) else None,
    "members": lambda v: [m for m in v[:_LIST_MAX] if isinstance(m, str) and RUN_ID.match(m)] if isinstance(v, list)
    else None,
    "counts": lambda v: {k[:40]: n for k, n in v.items() if isinstance(k, str) and _whole(n) is not None}
    if isinstance(v, dict) else None,
    "links": lambda v: [k for k in map(_link, v[:100]) if k] if isinstance(v, list) else None,
}


def _entry(value: Any) -> RunEntry | None:
    """A run or sweep as a reader may trust it: each field of its type (dropped otherwise); None without an id."""
    if not isinstance(value, dict) or not isinstance(value.get("id"), str) or not RUN_ID.match(value["id"]):
        return None
    number = _whole(value.get("number"))
    entry: Any = {"kind": "sweep" if value.get("kind") == "sweep" else "run", "id": value["id"],
                  "number": number if number is not None else 0,
                  "state": value["state"] if value.get("state") in STATES else "lost"}
    for name, take in _FIELDS.items():
        if name in value:
            got = take(value[name])
            if got is not None or value[name] is None:
                entry[name] = got
    entry.setdefault("submitted", 0.0)
    entry.setdefault("links", [])
    return entry


def _record(value: Any) -> KernelRecord | None:
    """A kernel's file as a reader may trust it; None when it is not one of this format, or its pid or times are
    not numbers a process or a clock could have."""
    if not (isinstance(value, dict) and value.get("format") == FORMAT and value.get("version") == VERSION):
        return None
    kernel_id, pid, updated = value.get("kernel_id"), _whole(value.get("pid")), _real(value.get("updated"))
    if not isinstance(kernel_id, str) or not _KERNEL_ID.match(kernel_id) or pid is None or not 0 < pid < 2**31 \
            or updated is None or not isinstance(value.get("entries"), list):
        return None
    entries = [e for e in map(_entry, value["entries"][:_LIST_MAX]) if e is not None]
    return {"format": FORMAT, "version": VERSION, "kernel_id": kernel_id, "pid": pid,
            "host": _text(value.get("host")) or "", "notebook": _text(value.get("notebook")),
            "started": _real(value.get("started")) or updated, "updated": updated, "ended": _real(value.get("ended")),
            "entries": entries}


def read_records(folder: Path) -> list[KernelRecord]:
    """Every kernel's file in ``folder`` that is of this format (others, torn or foreign files, are skipped)."""
    out: list[KernelRecord] = []
    try:
        held = Held(folder)
    except FileNotFoundError:
        return out
    with held:
        for name in sorted(n for n in held.names() if _FILE.match(n)):
            record = _record(held.read(name))
            if record is not None and name == f"kernel-{record['kernel_id']}.json":
                out.append(record)
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
    stale = [r["kernel_id"] for r in read_records(folder)
             if kernel_state(r, now) != "live" and now - float(r.get("ended") or r["updated"]) > KEEP_S]
    if not stale:
        return 0
    with Held(folder) as held:
        for kernel_id in stale:
            held.remove(kernel_file(folder, kernel_id).name)
            held.remove_tree(asks_dir(folder, kernel_id).name)
            held.remove_tree(reports_dir(folder, kernel_id).name)
            removed += 1
    return removed
