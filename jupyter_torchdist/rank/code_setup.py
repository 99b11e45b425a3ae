"""The notebook's code on a rank's host, before the group forms: its working directory, its modules, its packages.

What the kernel sends (``core.contract.code.CodeShip``) is named by its listing. Per host and user, one cache folder
(owner-only, in the temporary folder) keeps what was fetched: ``blobs/`` (a bundle's zip, a wheel, the last few
dozen), ``pip/`` (an overlay per requirement set: ``packages``). A run has its own folder there (``runs/<run>``)
with its copies of the bundles: the ranks of one host share it and the last to leave removes it; any later setup
on the host removes one whose ranks all died.

A host that sees the kernel's very folder (``core.code_folder.identity``: the kernel's machine) uses it in place, so
what the ranks write there lands beside the notebook, as before. Either way the run's modules are compiled from
their sources, never from a ``__pycache__`` that an edit within the same second could leave stale. Everything of the
run goes first on ``sys.path``, and a module of the same name a warm worker had imported from outside the installed
packages is forgotten, so the run's own copy is what ``import`` finds.
"""
from __future__ import annotations

import contextlib
import fcntl
import importlib
import importlib.machinery
import importlib.util
import os
import shutil
import socket
import stat
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from typing import Any

from ..core.code_folder import identity
from ..core.contract.code import Bundle, CodeShip
from .packages import CodeSetupError, check_needs, locked as _locked, overlay, use_overlay

__all__ = ["CodeSetupError", "CodeSetup", "set_up", "refresh", "fetcher", "cache_folder"]

Fetch = Callable[[str], bytes]
_KEEP_BLOBS = 24     # a host keeps the bundles and wheels of this many recent digests


def cache_folder() -> str:
    """This user's cache on this host; refused when someone else owns it or it is a link."""
    base = os.path.join(tempfile.gettempdir(), f"jupyter-torchdist-{os.getuid()}")
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(base)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise CodeSetupError(f"the cache folder {base} on {socket.gethostname()} is not this user's own (a link, "
                             "another owner, or open to others): remove it, or set TMPDIR to a private folder")
    for sub in ("blobs", "runs", "pip", "wheels"):
        os.makedirs(os.path.join(base, sub), mode=0o700, exist_ok=True)
    return base


def _blob(base: str, digest: str, fetch: Fetch) -> str:
    """A digest's bytes as a file on this host, fetched from the kernel the first time."""
    path = os.path.join(base, "blobs", digest)
    if not os.path.exists(path):
        with _locked(path + ".lock"):
            if not os.path.exists(path):
                data = fetch(digest)
                tmp = f"{path}.{os.getpid()}.part"
                with open(tmp, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
                _evict(base)
    os.utime(path)  # recently used: kept by _evict
    return path


def _evict(base: str) -> None:
    """Beyond the last ``_KEEP_BLOBS`` digests used, drop the oldest blobs (a run uses its own copies)."""
    folder = os.path.join(base, "blobs")
    blobs = [e for e in os.scandir(folder) if e.is_file() and len(e.name) == 64]
    for old in sorted(blobs, key=lambda e: e.stat().st_mtime)[:-_KEEP_BLOBS]:
        for path in (old.path, old.path + ".lock"):
            with contextlib.suppress(OSError):
                os.unlink(path)


def _unpack(blob_path: str, dest: str) -> None:
    """Unzip into ``dest`` atomically (a folder beside it, then renamed); a name leaving the folder is refused."""
    tmp = tempfile.mkdtemp(dir=os.path.dirname(dest), prefix=".unpack-")
    try:
        with zipfile.ZipFile(blob_path) as z:
            for info in z.infolist():
                target = os.path.realpath(os.path.join(tmp, info.filename))
                if not target.startswith(os.path.realpath(tmp) + os.sep):
                    raise CodeSetupError(f"a file of the run's bundle would land outside its folder: {info.filename}")
                z.extract(info, tmp)
                if (info.external_attr >> 16) & 0o111:
                    os.chmod(target, 0o755)
        try:
            os.rename(tmp, dest)
        except OSError:
            if not os.path.isdir(dest):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _in_place(bundle: Bundle) -> bool:
    """This host sees the kernel's folder itself (the kernel's machine, the same directory)."""
    return bool(bundle.identity) and identity(bundle.root) == bundle.identity


class _SourceOnly(importlib.machinery.SourceFileLoader):
    """Compiles a module from its source every time: a rank runs what the file says now."""

    def get_code(self, fullname: str) -> Any:
        path = self.get_filename(fullname)
        return compile(self.get_data(path), path, "exec", dont_inherit=True)


def _source_hook(roots: list[str]) -> Callable[[str], Any]:
    finder = importlib.machinery.FileFinder.path_hook(
        (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES),
        (_SourceOnly, importlib.machinery.SOURCE_SUFFIXES))

    def hook(path: str) -> Any:
        real = os.path.realpath(path or ".")
        if any(real == r or real.startswith(r + os.sep) for r in roots) and not _installed(real):
            return finder(path)
        raise ImportError("not the run's own code")

    return hook


_OURS = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def _installed(folder: str) -> bool:
    """An environment's packages (a .venv inside the project, say) or ours: not the user's code, so their bytecode
    caches serve as usual (compiling torch's modules from source would cost a rank seconds)."""
    parts = folder.split(os.sep)
    return "site-packages" in parts or "dist-packages" in parts or folder == _OURS or folder.startswith(_OURS + os.sep)


def _top_names(folder: str, entries: tuple[str, ...]) -> set[str]:
    if entries:
        return set(entries)
    names = set()
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            stem = entry.name[:-3] if entry.name.endswith(".py") else entry.name
            if stem.isidentifier() and (entry.name.endswith(".py") or entry.is_dir()):
                names.add(stem)
    return names


def _refresh_finders(paths: list[str]) -> None:
    """Import anew from the run's folders: the finders cached for them (they now load through ``_source_hook``; an
    environment inside them, a project's .venv, keeps its own), for relative entries (the working directory changes)
    and for paths that had none are forgotten, and the meta path's own finders told. Only those, not
    ``importlib.invalidate_caches()``: that frees a forked worker's every inherited finder (10 ms) and re-reads the
    directory of each zip and jar on a Spark worker's path (150 ms); the rest check their folders' times anyway."""
    roots = tuple({p for path in paths for p in (path, os.path.realpath(path))})

    def ours(path: str) -> bool:
        return any(path == r or path.startswith(r + os.sep) for r in roots)

    for key, finder in list(sys.path_importer_cache.items()):
        if finder is None or not os.path.isabs(key) or (
                not _installed(key) and (ours(key) or ours(os.path.realpath(key)))):
            del sys.path_importer_cache[key]
    for meta in sys.meta_path:
        invalidate = getattr(meta, "invalidate_caches", None)
        if meta is not importlib.machinery.PathFinder and callable(invalidate):
            invalidate()


def _forget(names: set[str], roots: list[str]) -> None:
    """A module of these names that this process imported before (a warm worker that ran the user's code, a stale
    copy) gives way to the run's own: dropped if it came from anywhere but the run's folders, or from them before an
    edit. One imported from there unchanged stays (a worker's startup may have imported it on purpose: patching torch,
    say), and ours, the standard library's and installed packages always stay."""
    names = {n for n in names if n in sys.modules and n != "jupyter_torchdist" and n not in sys.stdlib_module_names}
    # (a package never imported has no submodule imported either)
    if not names:
        return
    for name in list(sys.modules):
        top = name.split(".")[0]
        if top not in names:
            continue
        module = sys.modules[name]
        file = getattr(module, "__file__", None)
        if not isinstance(file, str):
            continue
        parts = file.split(os.sep)
        if "site-packages" in parts or "dist-packages" in parts:
            continue
        real = os.path.realpath(file)
        if any(real.startswith(root + os.sep) for root in roots) and not _edited_since_import(module, file):
            continue
        del sys.modules[name]


def _edited_since_import(module: Any, file: str) -> bool:
    """Whether ``file`` changed after ``module`` was compiled from it (its bytecode cache records the source's time
    and size); False when that cannot be told (no cache: PYTHONDONTWRITEBYTECODE, a read-only folder)."""
    cached = getattr(module, "__cached__", None)
    try:
        with open(cached, "rb") as f:  # type: ignore[arg-type]
            header = f.read(16)
        st = os.stat(file)
    except (OSError, TypeError):
        return False
    if len(header) < 16 or int.from_bytes(header[4:8], "little") != 0:  # a hash-based cache: checked on import
        return False
    return (int.from_bytes(header[8:12], "little"), int.from_bytes(header[12:16], "little")) != (
        int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF)


class CodeSetup:
    """What ``set_up`` did on this host: where the run's code is, and the working directory to leave at the end."""

    def __init__(self, base: str, run_key: str) -> None:
        self.base, self.run_key = base, run_key
        self.digests: dict[str, str] = {}   # each bundle's content as last set up ("wd", "m0", ...)
        self.placed: dict[str, str] = {}    # ... and where it is on this host
        self.paths: list[str] = []          # on sys.path, in this order, ahead of everything else
        self.names: set[str] = set()        # top-level modules the run's code provides
        self.workdir: str | None = None     # where the rank runs
        self.run_copy: str | None = None    # the run's own folder on this host, when it has copies there
        self._lock_fd: int | None = None
        self.warnings: list[str] = []
        self.seen: dict[str, tuple[int, int]] = {}  # module file -> (size, mtime) when last (re)loaded (kept ranks)
        self._own: tuple[list[str], dict[str, str | None]] = ([], {})  # the code's folders; each module's file if ours

    def activate(self) -> None:
        if self.paths:
            sys.path_hooks.insert(0, _source_hook([os.path.realpath(p) for p in self.paths]))
        for path in reversed(self.paths):
            while path in sys.path:
                sys.path.remove(path)
            sys.path.insert(0, path)
        _refresh_finders(self.paths)
        _forget(self.names, [os.path.realpath(p) for p in self.paths])
        if self.workdir is not None:
            os.chdir(self.workdir)

    def close(self) -> None:
        """Leave the run's folder on this host; the last of its ranks here to leave removes it."""
        if self._lock_fd is None or self.run_copy is None:
            return
        fd, self._lock_fd = self._lock_fd, None
        with contextlib.suppress(OSError):
            os.chdir(self.base)
        with _locked(self.run_copy + ".gate"):
            os.close(fd)  # our shared hold on it goes
            if _count(self.run_copy, -1) == 0:
                _remove_run(self.run_copy)

    # -- kept ranks -------------------------------------------------------------------------------------------------
    def note_loaded(self) -> None:
        """Remember the files of the run's modules as they are now (what a later edit is measured against)."""
        for _, file in self._own_modules():
            with contextlib.suppress(OSError):
                st = os.stat(file)
                self.seen.setdefault(file, (st.st_size, st.st_mtime_ns))

    def _own_modules(self) -> list[tuple[str, str]]:
        """The run's modules loaded now, with their files: under its code's folders and not an environment's packages
        (a .venv inside the project holds torch, which is nobody's edit). Each module is looked at once, when it is
        first seen: a rank that imported torch holds some 1,700 modules, and each kept cell asks twice."""
        roots = [os.path.realpath(p) for p in self.paths]
        if roots != self._own[0]:
            self._own = (roots, {})
        known = self._own[1]
        modules = sys.modules
        for name in modules.keys() - known.keys():
            file = getattr(modules.get(name), "__file__", None)
            real = os.path.realpath(file) if isinstance(file, str) else ""
            own = any(real.startswith(r + os.sep) for r in roots) and not _installed(os.path.dirname(real))
            known[name] = file if own else None
        return [(name, file) for name, file in known.items() if file is not None and name in modules]

    def reload_edited(self) -> list[str]:
        """Modules of the run's code whose files changed since they were loaded, reloaded in the order they were
        first imported (as %autoreload does); their names."""
        reloaded = []
        for name, file in self._own_modules():
            try:
                st = os.stat(file)
            except OSError:
                continue
            if self.seen.get(file, (st.st_size, st.st_mtime_ns)) != (st.st_size, st.st_mtime_ns):
                importlib.reload(sys.modules[name])
                reloaded.append(name)
            self.seen[file] = (st.st_size, st.st_mtime_ns)
        return reloaded


def _run_folder(setup: CodeSetup, run_key: str) -> str:
    """The run's own folder on this host (its copies of the bundles), shared by its ranks here. Its ranks are counted
    in and out under a lock (the last out removes it), and each holds a shared lock on it while it runs, so a folder
    whose ranks were all killed is known by nobody holding it (``_remove_abandoned``)."""
    if setup.run_copy is None:
        runs = os.path.join(setup.base, "runs")
        _remove_abandoned(runs)
        folder = os.path.join(runs, run_key)
        with _locked(folder + ".gate"):
            _count(folder, +1)
            os.makedirs(folder, mode=0o700, exist_ok=True)
            fd = os.open(folder + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_SH)
        setup._lock_fd, setup.run_copy = fd, folder
    return setup.run_copy


def _count(folder: str, step: int) -> int:
    """The ranks in a run's folder, changed by ``step`` (under its gate lock)."""
    path = folder + ".count"
    try:
        with open(path) as f:
            n = int(f.read() or 0)
    except (OSError, ValueError):
        n = 0
    n = max(0, n + step)
    with open(path, "w") as f:
        f.write(str(n))
    return n


def _remove_run(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    for end in (".lock", ".count"):
        with contextlib.suppress(OSError):
            os.unlink(folder + end)


def _copy(setup: CodeSetup, slot: str, bundle: Bundle, run_key: str, fetch: Fetch) -> str:
    """The run's copy of a bundle on this host (unpacked by the first of its ranks here, the others waiting)."""
    dest = os.path.join(_run_folder(setup, run_key), slot)
    if not os.path.isdir(dest):
        with _locked(dest + ".lock"):
            if not os.path.isdir(dest):
                _unpack(_blob(setup.base, bundle.digest, fetch), dest)
    return dest


def _sync(blob_path: str, dest: str) -> None:
    """A run's copy brought up to a bundle's new content: a file whose bytes changed is replaced (a new file, so its
    size and time say it changed), a new one added; what the ranks wrote there stays."""
    with zipfile.ZipFile(blob_path) as z:
        for info in z.infolist():
            target = os.path.realpath(os.path.join(dest, info.filename))
            if not target.startswith(os.path.realpath(dest) + os.sep):
                raise CodeSetupError(f"a file of the run's bundle would land outside its folder: {info.filename}")
            data = z.read(info)
            try:
                with open(target, "rb") as f:
                    if f.read() == data:
                        continue
            except OSError:
                pass
            os.makedirs(os.path.dirname(target), exist_ok=True)
            tmp = f"{target}.{os.getpid()}.part"
            with open(tmp, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o755 if (info.external_attr >> 16) & 0o111 else 0o644)
            os.replace(tmp, target)


def _remove_abandoned(runs: str) -> None:
    """Folders whose every rank is gone (killed before it could leave): nobody holds their lock. Old gates go too."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(runs):
            if entry.name.endswith(".gate") and not os.path.exists(entry.path[:-5] + ".count") \
                    and time.time() - entry.stat().st_mtime > 3600:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
            if not entry.name.endswith(".lock"):
                continue
            folder = entry.path[:-5]
            with _locked(folder + ".gate"):
                try:
                    fd = os.open(entry.path, os.O_RDWR)
                except OSError:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    _remove_run(folder)
                except OSError:
                    pass
                finally:
                    os.close(fd)


# -- all of it -------------------------------------------------------------------------------------------------------
def set_up(code: CodeShip, fetch: Fetch, run_key: str, lenient: bool = False) -> CodeSetup:
    """Put the run's code where its rank finds it, install its packages, check its imports; raises CodeSetupError
    (with what to do) when something cannot be. ``run_key`` names the run's own folder on this host. ``lenient``:
    an offline run's first (the ranks cannot reach the kernel, and the plan does not carry the code yet): a bundle
    that cannot be fetched is left out, with a warning, rather than failing the run."""
    setup = CodeSetup(cache_folder(), run_key)
    try:
        for slot, bundle in _slots(code):
            try:
                path = bundle.root if _in_place(bundle) else _copy(setup, slot, bundle, run_key, fetch)
            except CodeSetupError:
                if not lenient:
                    raise
                setup.warnings.append(f"{bundle.root} could not reach {socket.gethostname()} (the executors cannot "
                                      "reach the kernel); the next run carries it in its plan")
                continue
            setup.paths.append(path)
            setup.placed[slot] = path
            setup.digests[slot] = bundle.digest
            setup.names |= _top_names(path, bundle.entries)
            if slot == "wd":
                setup.workdir = path
        if code.pip is not None:
            use_overlay(overlay(setup.base, code.pip, lambda d: _blob(setup.base, d, fetch)))
        setup.activate()
        setup.warnings += check_needs(code.needs, setup.names)
    except BaseException:
        setup.close()
        raise
    return setup


def _slots(code: CodeShip) -> list[tuple[str, Bundle]]:
    """Each bundle with the name of its copy in the run's folder: "wd" the working directory, "m0"... the modules."""
    return ([("wd", code.workdir)] if code.workdir is not None else []) + [
        (f"m{i}", b) for i, b in enumerate(code.modules)]


def refresh(setup: CodeSetup, code: CodeShip, fetch: Fetch) -> list[str]:
    """Kept ranks, before a cell: the run's copies brought up to the notebook's code as of that cell, then the modules
    whose files changed reloaded. Their names. (A bundle that appeared only now is not added: a new kept set is.)"""
    for slot, bundle in _slots(code):
        path = setup.placed.get(slot)
        if path is not None and setup.digests.get(slot) not in (None, bundle.digest) and path != bundle.root:
            _sync(_blob(setup.base, bundle.digest, fetch), path)
            setup.digests[slot] = bundle.digest
    return setup.reload_edited()


def fetcher(address: tuple[str, int], secret: bytes, rank: int, tls: Any) -> Fetch:
    """How this rank asks the kernel's channel for a digest's bytes (a connection of its own per fetch)."""
    from ..channel import protocol as P
    from ..channel.handshake import connect
    from ..core import contract as C

    def fetch(digest: str) -> bytes:
        sock = connect(address, secret, rank, P.ROLE_FILES, tls=tls)
        try:
            ask: C.FetchMsg = {"t": C.FETCH, "digest": digest}
            P.send_frame(sock, ask)
            reply = P.recv_frame(sock, (1 << 31) - 1)
        finally:
            sock.close()
        data = reply.get("data") if isinstance(reply, dict) and reply.get("t") == C.BLOB else None
        if not isinstance(data, (bytes, bytearray)):
            why = reply.get("error") if isinstance(reply, dict) else None
            raise CodeSetupError(f"the kernel could not send the run's files ({digest[:12]}) to "
                                 f"{socket.gethostname()}: {why or 'it no longer has them'}; run the cell again")
        return bytes(data)

    return fetch

