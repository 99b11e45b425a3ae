"""The registry's folder: under Jupyter's runtime directory, owner-only, written atomically.

Jupyter keeps the user's kernels' connection files in its runtime directory (``JUPYTER_RUNTIME_DIR``, else
``jupyter_core.paths.jupyter_runtime_dir()``); a kernel started by a Jupyter server inherits the server's, so the
kernels and their server find the same folder, and a user's runtime directory is theirs alone (JupyterHub gives each
user their own). The folder is made ``0700`` and every file ``0600``; a folder another user owns, or a link in its
place, is refused: nothing here follows a link or reads another account's files. Files are replaced whole (written
beside, then renamed), so a reader never sees half a file.
"""
from __future__ import annotations

import json
import math
import os
import stat
import sys
from pathlib import Path
from typing import Any, Final

__all__ = ["FOLDER_NAME", "RegistryError", "runtime_dir", "registry_dir", "write_json", "read_json", "remove",
           "finite", "ensure_private"]

FOLDER_NAME: Final = "jupyter-torchdist-runs"
MAX_BYTES: Final = 8 * 1024 * 1024   # a file larger than this is not ours: never read it whole


class RegistryError(OSError):
    """The registry's folder cannot be used safely (someone else owns it, or it is not a folder)."""


def runtime_dir() -> Path:
    """Jupyter's runtime directory as Jupyter resolves it (``JUPYTER_RUNTIME_DIR`` first)."""
    if os.environ.get("JUPYTER_RUNTIME_DIR"):
        return Path(os.environ["JUPYTER_RUNTIME_DIR"]).expanduser()
    try:
        from jupyter_core.paths import jupyter_runtime_dir
    except ImportError:   # a command-line environment without Jupyter: jupyter_core's own default
        return _data_dir() / "runtime"
    return Path(jupyter_runtime_dir())


def _data_dir() -> Path:
    if os.environ.get("JUPYTER_DATA_DIR"):
        return Path(os.environ["JUPYTER_DATA_DIR"]).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Jupyter"
    if os.name == "nt":
        return Path(os.environ.get("APPDATA") or Path.home()) / "jupyter"
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "jupyter"


def registry_dir(base: Path | None = None, create: bool = False) -> Path | None:
    """The registry's folder (``<runtime dir>/jupyter-torchdist-runs``), made owner-only when ``create``; None when it
    does not exist and ``create`` is false. Raises ``RegistryError`` when it is unsafe to use."""
    folder = (base if base is not None else runtime_dir()) / FOLDER_NAME
    if create:
        folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass
    return ensure_private(folder) if create or os.path.lexists(folder) else None


def ensure_private(folder: Path) -> Path:
    """``folder`` is a real folder of this user, readable by nobody else (made so when it is ours)."""
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        raise RegistryError(f"{folder} does not exist") from None
    if not stat.S_ISDIR(info.st_mode):
        raise RegistryError(f"{folder} is not a folder (a link or a file is in its place): remove it, and "
                            "jupyter-torchdist makes the folder again")
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise RegistryError(f"{folder} belongs to another user (uid {info.st_uid}): jupyter-torchdist reads only your "
                            "own runtime directory. Set JUPYTER_RUNTIME_DIR to a folder of yours.")
    if info.st_mode & 0o077:
        os.chmod(folder, 0o700)
    return folder


def write_json(path: Path, value: Any) -> int:
    """Replace ``path`` with ``value`` as JSON, atomically, owner-only; the bytes written."""
    try:
        data = json.dumps(value, separators=(",", ":"), allow_nan=False, default=str).encode()
    except ValueError:   # a NaN or an infinity (a loss that diverged): JSON has none, the browser would refuse it
        data = json.dumps(finite(value), separators=(",", ":"), allow_nan=False, default=str).encode()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        remove(tmp)
        raise
    return len(data)


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity written as text ("nan", "inf", "-inf")."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def read_json(path: Path) -> Any:
    """The JSON in ``path`` (never through a link, never more than ``MAX_BYTES``); None when it is gone or torn."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def remove(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
