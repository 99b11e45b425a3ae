"""Our folders under Jupyter's runtime directory (the runs registry's, detached runs'): owner-only, held open,
written atomically.

Jupyter keeps the user's kernels' connection files in its runtime directory (``JUPYTER_RUNTIME_DIR``, else
``jupyter_core.paths.jupyter_runtime_dir()``); a kernel started by a Jupyter server inherits the server's, so the
kernels and their server find the same folder, and a user's runtime directory is theirs alone (JupyterHub gives each
user their own). But a runtime directory can be shared by mistake (a ``/tmp`` others write to), so nothing here
trusts a name once checked:

- a folder is opened once (``Held``: never through a link, refused when another user owns it, made ``0700``) and
  every file in it is then opened *relative to that descriptor*: a folder swapped for a link, or renamed and replaced
  after it was checked, is never the one read or written;
- a file is read only when it is a regular file of this user and at most ``MAX_BYTES`` (never a link, a named pipe
  that would block, or a device), and never trusted further than its JSON parses;
- a file is written beside under an unpredictable name that must not exist yet (``O_EXCL``), ``0600``, then renamed
  over the old one, so a reader never sees half a file and nobody can have made the file the kernel writes.
"""
from __future__ import annotations

import json
import math
import os
import secrets
import stat
import sys
from pathlib import Path
from typing import Any, Final

__all__ = ["FOLDER_NAME", "RegistryError", "Held", "runtime_dir", "registry_dir", "write_json", "read_json", "remove",
           "finite", "ensure_private"]

FOLDER_NAME: Final = "jupyter-torchdist-runs"
MAX_BYTES: Final = 8 * 1024 * 1024   # a file larger than this is not ours: never read it whole
_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY: Final = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK: Final = getattr(os, "O_NONBLOCK", 0)
_AT: Final = os.open in os.supports_dir_fd and os.rename in os.supports_dir_fd   # Linux, macOS (os.replace too)


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


def _check(info: os.stat_result, folder: Path) -> None:
    if not stat.S_ISDIR(info.st_mode):
        raise RegistryError(f"{folder} is not a folder (a link or a file is in its place): remove it, and "
                            "jupyter-torchdist makes the folder again")
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise RegistryError(f"{folder} belongs to another user (uid {info.st_uid}): jupyter-torchdist reads only your "
                            "own runtime directory. Set JUPYTER_RUNTIME_DIR to a folder of yours.")


def ensure_private(folder: Path) -> Path:
    """``folder`` is a real folder of this user, readable by nobody else (made so when it is ours)."""
    with Held(folder):
        return folder


class Held:
    """An owner-only folder held open: its files are opened relative to it (``dir_fd``), so what was checked is what
    is used, whatever happens to its name afterwards. A context manager; ``close`` when done."""

    def __init__(self, folder: Path, *, parent: Held | None = None, create: bool = False) -> None:
        self.path: Path = folder if parent is None else parent.path / folder.name
        self.fd: int | None = None
        name: Any = folder.name if parent is not None and _AT else self.path
        where: dict[str, Any] = {"dir_fd": parent.fd} if parent is not None and _AT else {}
        if create:
            try:
                os.mkdir(name, 0o700, **where)
            except FileExistsError:
                pass
        try:
            fd = os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW, **where)
        except FileNotFoundError:
            raise
        except OSError:   # ELOOP (a link), ENOTDIR (a file)
            _check(os.lstat(self.path), self.path)
            raise
        try:
            info = os.fstat(fd)
            _check(info, self.path)
            if info.st_mode & 0o077:
                os.fchmod(fd, 0o700)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def _at(self, name: str) -> tuple[Any, dict[str, Any]]:
        if os.sep in name or name in ("", ".", ".."):
            raise ValueError(f"not a file name: {name!r}")
        return (name, {"dir_fd": self.fd}) if _AT else (str(self.path / name), {})

    def sub(self, name: str, create: bool = False) -> Held:
        """A folder in this one, held the same way (``FileNotFoundError`` when it is not there and not ``create``)."""
        return Held(Path(name), parent=self, create=create)

    def names(self) -> list[str]:
        return os.listdir(self.fd if _AT and self.fd is not None else self.path)

    def changed_ns(self) -> int:
        """The folder's modification time (a file was added or removed)."""
        return os.fstat(self.fd).st_mtime_ns if self.fd is not None else os.stat(self.path).st_mtime_ns

    def exists(self, name: str) -> bool:
        where, kw = self._at(name)
        try:
            os.stat(where, follow_symlinks=False, **kw)
        except FileNotFoundError:
            return False
        return True

    def mtime(self, name: str) -> float | None:
        where, kw = self._at(name)
        try:
            return os.stat(where, follow_symlinks=False, **kw).st_mtime
        except FileNotFoundError:
            return None

    def read(self, name: str) -> Any:
        """The JSON of the file ``name``: None unless it is a regular file of this user, at most ``MAX_BYTES``, and
        JSON (however deep: a file nested past Python's recursion limit is not one of ours)."""
        data = self.read_bytes(name)
        if data is None:
            return None
        try:
            return json.loads(data)
        except (ValueError, RecursionError):
            return None

    def read_bytes(self, name: str, max_bytes: int = MAX_BYTES) -> bytes | None:
        """The bytes of the file ``name``: None unless it is a regular file of this user of at most ``max_bytes``
        (never through a link, never blocking on a named pipe)."""
        where, kw = self._at(name)
        try:
            fd = os.open(where, os.O_RDONLY | _NOFOLLOW | _NONBLOCK, **kw)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes or \
                    (hasattr(os, "getuid") and info.st_uid != os.getuid()):
                return None
            data = f.read(max_bytes + 1)
        return data if len(data) <= max_bytes else None

    def write(self, name: str, value: Any) -> int:
        """Replace the file ``name`` with ``value`` as JSON, atomically, owner-only; the bytes written."""
        return self.write_bytes(name, _dumps(value))

    def write_bytes(self, name: str, data: bytes) -> int:
        """Replace the file ``name`` with ``data``, atomically (a reader sees the old file or the new), owner-only,
        under a name nobody could have made first."""
        tmp = f".{name}.{secrets.token_hex(8)}.tmp"
        where, kw = self._at(tmp)
        fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, **kw)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            target, _ = self._at(name)
            os.replace(where, target, **({"src_dir_fd": self.fd, "dst_dir_fd": self.fd} if _AT else {}))
        except BaseException:
            self.remove(tmp)
            raise
        return len(data)

    def remove(self, name: str) -> None:
        where, kw = self._at(name)
        try:
            os.unlink(where, **kw)
        except FileNotFoundError:
            pass

    def remove_tree(self, name: str) -> None:
        """Remove the folder ``name`` in this one and all in it (never following a link)."""
        try:
            sub = self.sub(name)
        except OSError:
            self.remove(name)   # not a folder (a file or a link in its place): that alone goes
            return
        with sub:
            for entry in sub.names():
                sub.remove(entry)
        where, kw = self._at(name)
        try:
            os.rmdir(where, **kw)
        except OSError:
            pass


def _dumps(value: Any) -> bytes:
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False, default=str).encode()
    except ValueError:   # a NaN or an infinity (a loss that diverged): JSON has none, the browser would refuse it
        return json.dumps(finite(value), separators=(",", ":"), allow_nan=False, default=str).encode()


def write_json(path: Path, value: Any) -> int:
    """Replace ``path`` with ``value`` as JSON, atomically, owner-only; the bytes written (its folder checked now:
    a long-lived writer holds its folder instead, ``Held.write``)."""
    with Held(path.parent) as folder:
        return folder.write(path.name, value)


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
    """The JSON in ``path``, read as ``Held.read`` reads (its folder must be a private folder of this user)."""
    try:
        with Held(path.parent) as folder:
            return folder.read(path.name)
    except OSError:
        return None


def remove(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
