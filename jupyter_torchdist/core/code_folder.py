"""Which files of a folder travel with a run, and whether a rank's host sees the kernel's very folder.

The kernel lists and names what it ships with it (``kernel/code_ship.py``); a rank's host asks ``identity`` whether
the folder at the kernel's path is the kernel's own (``rank/code_setup.py``): the same machine since its last boot
and the same directory (device and inode), however it is mounted. Then the rank uses it in place, files being written
meanwhile included; anywhere else (another machine, a container, a worker with an empty folder mounted over it) it
gets a copy.

Left out: version-control and Jupyter's own folders (``.git``, ``.ipynb_checkpoints``, ``__pycache__``), tools' caches
(``.mypy_cache``, ``.pytest_cache``, ``.ruff_cache``, ``.tox``, ``.nox``, ``node_modules``), Python environments (a
folder with ``pyvenv.cfg``: never the notebook's own files, and always far past the cap), and what the folder's
``.gitignore`` names (a pragmatic subset of git's rules: comments, ``!`` negation, a trailing ``/`` for folders only,
a ``/`` inside a pattern anchoring it to the folder, ``*``, ``?``, ``[...]`` and ``**``).
"""
from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import stat
from dataclasses import dataclass

__all__ = ["FileEntry", "list_files", "stat_key", "identity", "SKIPPED_DIRS"]

# version control, Jupyter's own, and tools' caches: never what a rank reads, often far past the cap
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", ".ipynb_checkpoints", "__pycache__", ".mypy_cache", ".pytest_cache",
                          ".ruff_cache", ".tox", ".nox", "node_modules"})


@dataclass(frozen=True)
class FileEntry:
    rel: str          # path inside the folder, "/"-separated
    path: str         # where it is on this machine
    size: int
    mtime_ns: int
    executable: bool


class _Ignore:
    """The rules of one ``.gitignore`` at the folder's top."""

    def __init__(self, root: str) -> None:
        self.rules: list[tuple[re.Pattern[str], bool, bool]] = []  # (pattern, negated, folders only)
        try:
            with open(os.path.join(root, ".gitignore"), encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return
        for line in lines:
            line = line.rstrip()
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            line = line[1:] if negated else line
            folders_only = line.endswith("/")
            line = line.strip("/") if folders_only else line
            anchored = "/" in line.rstrip("/")
            line = line.lstrip("/")
            if not line:
                continue
            self.rules.append((_compile(line, anchored), negated, folders_only))

    def ignored(self, rel: str, is_dir: bool) -> bool:
        out = False
        for pattern, negated, folders_only in self.rules:
            if folders_only and not is_dir:
                continue
            if pattern.match(rel):
                out = not negated
        return out


def _compile(pattern: str, anchored: bool) -> re.Pattern[str]:
    """A git pattern as a regex over "/"-separated relative paths."""
    parts = []
    for piece in re.split(r"(/\*\*/|\*\*/|/\*\*|\*\*)", pattern):
        if piece == "/**/":
            parts.append("/(?:.*/)?")
        elif piece == "**/":
            parts.append("(?:.*/)?")
        elif piece == "/**":
            parts.append("/.*")
        elif piece == "**":
            parts.append(".*")
        else:
            parts.append(fnmatch.translate(piece)[4:-3].replace(".*", "[^/]*"))  # "(?s:" ... ")\Z"
    body = "".join(parts)
    return re.compile(("" if anchored else "(?:.*/)?") + body + r"\Z", re.S)


def _is_environment(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "pyvenv.cfg")) or os.path.isdir(os.path.join(path, "conda-meta"))


def list_files(root: str, entries: tuple[str, ...] = (), most: int | None = None) -> list[FileEntry]:
    """The files of ``root`` that travel (only those under ``entries``: top-level module or package names, when
    given), sorted by relative path; at most ``most`` of them (the walk stops there: a home folder of a million
    files costs no more than the cap). Unreadable folders are passed over; links to folders are not followed."""
    ignore = _Ignore(root)
    out: list[FileEntry] = []
    limit = most if most is not None else 1 << 62
    for start in [""] if not entries else [n for e in entries for n in (e, e + ".py")]:
        path = os.path.join(root, start) if start else root
        if os.path.isfile(path):
            _add(out, start, path, ignore)
        elif os.path.isdir(path) and not (start and _is_environment(path)):
            _walk(root, start, ignore, out, limit)
    out.sort(key=lambda e: e.rel)
    return out[:limit]


def _add(out: list[FileEntry], rel: str, path: str, ignore: _Ignore) -> None:
    try:
        st = os.stat(path)
    except OSError:
        return
    if stat.S_ISREG(st.st_mode) and not ignore.ignored(rel, False):
        out.append(FileEntry(rel, path, st.st_size, st.st_mtime_ns, bool(st.st_mode & 0o111)))


def _walk(root: str, rel: str, ignore: _Ignore, out: list[FileEntry], limit: int) -> None:
    try:
        entries = sorted(os.scandir(os.path.join(root, rel) if rel else root), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if len(out) >= limit:
            return
        child = f"{rel}/{entry.name}" if rel else entry.name
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            continue
        if entry.name in SKIPPED_DIRS or ignore.ignored(child, is_dir):
            continue
        if is_dir:
            if not _is_environment(entry.path):
                _walk(root, child, ignore, out, limit)
        elif not entry.is_symlink() or os.path.isfile(entry.path):  # a link to a file travels as that file
            _add(out, child, entry.path, ignore)


def stat_key(files: list[FileEntry]) -> str:
    """What a folder's listing looks like (names, sizes, times): equal keys mean the same folder, unchanged."""
    h = hashlib.sha256()
    for e in files:
        h.update(f"{e.rel}\0{e.size}\0{e.mtime_ns}\0{int(e.executable)}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        import socket

        return socket.gethostname()


def identity(path: str) -> str:
    """This machine (since its boot) and the directory at ``path`` (device, inode); "" when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return ""
    return f"{_boot_id()}:{st.st_dev}:{st.st_ino}" if stat.S_ISDIR(st.st_mode) else ""
