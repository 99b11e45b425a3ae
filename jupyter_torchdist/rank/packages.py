"""The run's packages on a rank's host: what ``--pip`` and ``--requirements`` add, and a check of what the code imports.

What the run's code imports from installed packages (``CodeShip.needs``) is checked before the group forms: a package
this host's Python lacks is named, with the --pip that would send it, before any rank waits for its peers.

pip resolves the set against the host's own Python (``--dry-run --report``), so what is installed there already is
used as it is; only what is missing goes into a folder of the set's own (``<cache>/pip/<digest>``, keyed by the set,
the Python and the platform), installed with ``--target`` and ``--no-deps``. The host's environment is never
touched, and every later run with the same set finds the folder ready. A package the worker has imported already
(torch, numpy, pandas) cannot be swapped this way: the overlay adds, it does not replace.
"""
from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from importlib import metadata

from ..core.contract.code import NeededImport, PipSet

__all__ = ["CodeSetupError", "overlay", "use_overlay", "locked", "check_needs"]

_PIP_TAIL = 15  # lines of pip's output a failed install shows


class CodeSetupError(RuntimeError):
    """The run's code or packages cannot be set up on this host; ``details`` has the lines that say why."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """An exclusive lock on ``path`` (created if need be) for the block: one process of the host at a time."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def overlay(base: str, wanted: PipSet, wheel: Callable[[str], str]) -> str:
    """The overlay of ``wanted`` on this host: installed once (by one rank, the others waiting), then reused.
    ``wheel(digest)``: where a wheel that travels with the run is on this host (fetched from the kernel)."""
    dest = os.path.join(base, "pip", wanted.digest)
    if os.path.isdir(dest):
        return dest
    with locked(dest + ".lock"):
        if not os.path.isdir(dest):
            _install(base, wanted, wheel, dest)
    return dest


def _pip_run(args: list[str], what: str) -> str:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-_PIP_TAIL:])
        raise CodeSetupError(f"--pip: {what} failed on {socket.gethostname()} (pip exit {proc.returncode}; its "
                             f"Python {sys.executable}). pip's last lines:\n{tail}", tail)
    return proc.stdout


def _install(base: str, wanted: PipSet, wheel: Callable[[str], str], dest: str) -> None:
    """Ask pip what this Python lacks of the set (resolved against its own packages), then install just that into a
    folder of its own: the host's environment is never touched."""
    specs = []
    for spec in wanted.specs:
        if spec.startswith("wheel:"):
            digest = spec[len("wheel:"):]
            filename = dict(wanted.wheels)[digest]
            folder = os.path.join(base, "wheels", digest)
            os.makedirs(folder, mode=0o700, exist_ok=True)
            path = os.path.join(folder, filename)
            if not os.path.exists(path):
                shutil.copyfile(wheel(digest), path)
            specs.append(path)
        else:
            specs.append(spec)
    with tempfile.TemporaryDirectory(dir=os.path.join(base, "pip")) as tmp:
        if wanted.requirements:
            req = os.path.join(tmp, "requirements.txt")
            with open(req, "w", encoding="utf-8") as f:
                f.write(wanted.requirements)
            specs += ["-r", req]
        what = " ".join(s for s in wanted.specs) or "the requirements"
        report = json.loads(_pip_run(["install", "--dry-run", "--quiet", "--report", "-", *specs], f"resolving {what}")
                            or "{}")
        todo = []
        for item in report.get("install", []):
            url = str(item.get("download_info", {}).get("url", ""))
            meta = item.get("metadata", {})
            todo.append(url[len("file://"):] if url.startswith("file://")
                        else f"{meta.get('name')}=={meta.get('version')}")
        target = os.path.join(tmp, "site")
        os.mkdir(target)
        if todo:
            _pip_run(["install", "--quiet", "--no-deps", "--target", target, *todo], f"installing {what}")
        os.rename(target, dest)


def use_overlay(folder: str) -> None:
    """The overlay's packages first on sys.path (its .pth files read as site-packages' are)."""
    import site

    before = list(sys.path)
    site.addsitedir(folder)
    added = [p for p in sys.path if p not in before]
    sys.path[:] = added + before


# -- what the ranks' Python must have --------------------------------------------------------------------------------
def _version_here(need: NeededImport) -> str:
    """This Python's version of the package: an imported module's own ``__version__`` (a warm worker imported torch,
    numpy, pandas: reading their records costs milliseconds each), else its distribution's record."""
    module = sys.modules.get(need.name)
    version = getattr(module, "__version__", None) if module is not None else None
    if isinstance(version, str):
        return version
    try:
        return metadata.version(need.dist or need.name)
    except (metadata.PackageNotFoundError, ValueError):
        return ""


def check_needs(needs: tuple[NeededImport, ...], provided: set[str]) -> list[str]:
    """Every package the run's code imports (and no bundle of it carries) can be imported here, or CodeSetupError
    names them with the --pip that would send them; a version other than the kernel's is a warning (returned)."""
    missing: list[NeededImport] = []
    differ: list[str] = []
    for need in needs:
        if need.name in provided:
            continue
        try:
            found = need.name in sys.modules or importlib.util.find_spec(need.name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(need)
            continue
        if need.version:
            here = _version_here(need)
            if here and here.split("+")[0] != need.version.split("+")[0]:
                differ.append(f"{need.dist or need.name} {here} here, {need.version} in the kernel")
    if missing:
        names = ", ".join(f"`{m.name}`" for m in missing)
        pips = " ".join(f"--pip {m.dist or m.name}" + (f"=={m.version}" if m.version else "") for m in missing)
        it = "them" if len(missing) > 1 else "it"
        raise CodeSetupError(f"{names} cannot be imported on {socket.gethostname()} (its Python {sys.executable}), "
                             f"though the kernel has {it}: install {it} there, or send {it} with the run: {pips}")
    return [f"on {socket.gethostname()}: {'; '.join(differ)}"] if differ else []
