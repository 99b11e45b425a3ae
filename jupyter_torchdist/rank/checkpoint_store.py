"""Where commits live: a folder (local, or a shared file system every host mounts) or an ``fsspec`` URL.

A commit is one object, ``commit-<step>.pt``, written once by rank 0 and read by every rank on a restart. Writes
are atomic: a folder gets a temporary name first and an atomic rename after (``os.replace``); an object store's
PUT is atomic by itself (a reader sees the whole object or none). So a restart never sees half a commit: the
latest *complete* commit is the highest step present. The last ``KEEP`` commits are kept, older ones removed.
"""
from __future__ import annotations

import os
import re
import secrets
from typing import Any, Final

__all__ = ["Store", "KEEP", "commit_name"]

KEEP: Final = 2
_NAME = re.compile(r"^commit-(\d{12})\.pt$")


def commit_name(step: int) -> str:
    return f"commit-{step:012d}.pt"


def _is_url(where: str) -> bool:
    return "://" in where and not where.startswith("file://")


class Store:
    """One checkpoint folder or URL. Methods raise OSError (or the fsspec backend's error) on I/O failure."""

    def __init__(self, where: str) -> None:
        self.where = where
        self._fs: Any = None
        if _is_url(where):
            import fsspec  # torch depends on it: every rank has it

            self._fs, self._root = fsspec.core.url_to_fs(where)
        else:
            self._root = where[len("file://"):] if where.startswith("file://") else where

    def _path(self, name: str) -> str:
        return f"{self._root.rstrip('/')}/{name}"

    def write(self, name: str, data: bytes) -> None:
        """Write ``name`` atomically (readers see all of it or nothing)."""
        if self._fs is not None:
            self._fs.pipe_file(self._path(name), data)
            return
        os.makedirs(self._root, exist_ok=True)
        tmp = self._path(f".{name}.{secrets.token_hex(4)}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._path(name))
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def read(self, name: str) -> bytes:
        if self._fs is not None:
            return bytes(self._fs.cat_file(self._path(name)))
        with open(self._path(name), "rb") as f:
            return f.read()

    def names(self) -> list[str]:
        """Every name in the folder (none if it does not exist yet)."""
        if self._fs is not None:
            try:
                return [p.rstrip("/").rsplit("/", 1)[-1] for p in self._fs.ls(self._root, detail=False)]
            except FileNotFoundError:
                return []
        try:
            return os.listdir(self._root)
        except FileNotFoundError:
            return []

    def remove(self, name: str) -> None:
        try:
            if self._fs is not None:
                self._fs.rm_file(self._path(name))
            else:
                os.unlink(self._path(name))
        except FileNotFoundError:
            pass

    def steps(self) -> list[int]:
        """The steps of the complete commits here, in order."""
        return sorted(int(m[1]) for name in self.names() if (m := _NAME.match(name)))

    def prune(self, keep: int = KEEP) -> None:
        """Remove all but the ``keep`` latest commits."""
        for step in self.steps()[:-keep]:
            self.remove(commit_name(step))
