"""Where detached runs live between the kernel that started them and any kernel that attaches: one owner-only folder
per user, beside the runs registry in Jupyter's runtime directory, and a folder per run in it::

    <runtime dir>/jupyter-torchdist-detached/<id>/
        spec.pkl      what the kernel handed over: the packed cell, its options, where it came from (written once)
        runner.json   the runner's pid, from its start to its end
        sock          the runner's socket while it runs: only its owner connects (the folders are 0700, and both
                      ends check the other's uid)
        outcome.pkl   how it ended: its state, its value or its error, its last frame (kept KEEP_S after its end)
        runner.log    the runner's own output (a Python warning, a crash)

Every file is opened through the held folder (``core.held_folder.Held``): never through a link, only this user's,
written atomically under names nobody could have made first. The ids are the runs' durable ids (``handle.new_id``).
"""
from __future__ import annotations

import os
import re
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any, Final

from ...core.held_folder import Held, runtime_dir

__all__ = ["FOLDER_NAME", "KEEP_S", "check_id", "held", "run_folder", "socket_path", "peer_is_owner", "ids",
           "clean", "pid_alive", "notebook_report_path"]

FOLDER_NAME: Final = "jupyter-torchdist-detached"
KEEP_S: Final = 7 * 24 * 3600.0   # an ended run's value and report wait this long for a kernel to collect them
MAX_SPEC_BYTES: Final = 4 << 30  # a spec or an outcome file larger than this is not ours
_ID: Final = re.compile(r"^[0-9a-f]{12}$")


def check_id(run_id: Any) -> str:
    """A detached run's id as ``run.id`` and ``jupyter-torchdist runs`` show it (12 hex digits), or ValueError."""
    if not isinstance(run_id, str) or not _ID.match(run_id.strip().lower()):
        raise ValueError(f"{run_id!r} is not a run's id: ids are 12 hex digits, as run.id, jupyter_torchdist.runs("
                         "detached=True) and `jupyter-torchdist runs` show them (e.g. 3f2a9c01b7de)")
    return run_id.strip().lower()


def held(create: bool = False) -> Held | None:
    """The user's detached runs' folder, held open (None when there is none yet and ``create`` is false)."""
    path = runtime_dir() / FOLDER_NAME
    if create:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        return Held(path, create=create)
    except FileNotFoundError:
        return None


def run_folder(top: Held, run_id: str, create: bool = False) -> Held:
    """The folder of run ``run_id`` (``FileNotFoundError`` when there is none)."""
    return top.sub(check_id(run_id), create=create)


def socket_path(folder: Held) -> str:
    """The address of the runner's socket in its run's folder. On Linux it is reached through the folder's open
    descriptor, so the path is short (a socket's path has ~100 bytes at most) and is the folder that was checked."""
    if sys.platform.startswith("linux") and folder.fd is not None and os.path.isdir(f"/proc/self/fd/{folder.fd}"):
        return f"/proc/self/fd/{folder.fd}/sock"
    return str(folder.path / "sock")


def peer_is_owner(sock: socket.socket) -> bool:
    """Whether the process at the other end of a Unix socket runs as this user (the kernel's uid). Where the
    platform cannot say, the owner-only folder is the only gate."""
    if not hasattr(socket, "SO_PEERCRED") or not hasattr(os, "getuid"):
        return True
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", raw)
    return bool(uid == os.getuid())


def ids(top: Held) -> list[str]:
    """Every detached run's id in the folder, oldest first."""
    found = [(top.mtime(name) or 0.0, name) for name in top.names() if _ID.match(name)]
    return [name for _, name in sorted(found)]


def clean(top: Held, now: float | None = None) -> None:
    """Forget runs that ended more than ``KEEP_S`` ago, and the folders of runs whose runner died before it said
    how its run ended (no runner pid alive, no outcome) once a day has passed."""
    now = time.time() if now is None else now
    for run_id in ids(top):
        try:
            with run_folder(top, run_id) as folder:
                ended = folder.mtime("outcome.pkl")
                runner = folder.read("runner.json")
                started = folder.mtime("spec.pkl") or 0.0
        except OSError:
            continue
        pid = runner.get("pid") if isinstance(runner, dict) else None
        gone = ended is None and not pid_alive(pid) and now - started > 24 * 3600
        if (ended is not None and now - ended > KEEP_S) or gone:
            top.remove_tree(run_id)


def pid_alive(pid: Any) -> bool:
    """Whether ``pid`` is a live process of this user (a runner's pid as it said it)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < 1 << 22:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False   # another user's process has that pid now: not our runner
    return True


def notebook_report_path(notebook: str | None, cwd: str, run_id: str) -> Path | None:
    """Where a detached run's report is saved when it ends: beside its notebook (``<notebook>.run-<id>.html``), in
    the folder the notebook's kernel ran in; None for a run not started from a notebook."""
    if not notebook:
        return None
    stem = Path(notebook).name.rsplit(".ipynb", 1)[0]
    return Path(cwd) / f"{stem}.run-{run_id}.html"
