"""What of the notebook's own code travels with a run: the kernel's side (``core.contract.code`` says what it is).

A rank on another machine has none of the notebook's folder. So every run carries, by content:

* the **working directory** (the notebook's folder, or ``--workdir PATH``): each rank runs in it, so relative paths
  (``open("data.txt")``) and modules beside the notebook (``import mymodel``) work everywhere;
* the **modules from the kernel's other ``sys.path`` entries** that the run uses (``sys.path.append("../src")``):
  those its code imports (the cell's and its functions' bytecode, every module the pickled payload refers to) and,
  through their sources, what they import in turn;
* the **packages** of ``--pip`` and ``--requirements`` (a local wheel travels too).

Packages from site-packages and the standard library never travel: the ranks' Python must have them, which each rank
checks before the group forms (``CodeShip.needs``). A folder is named by a digest of its path and listing (every
file's name, size and time: a walk, no file read), so an unchanged folder costs a rerun a few milliseconds and an
edited one gets a new name; its bytes are read and zipped only when a host that lacks them asks (``blob``), and
checked then against the listing. Ranks on the kernel's own machine use the folder in place, so the cap on what
travels applies only to runs whose ranks run elsewhere (a 1 GB data file beside the notebook never blocks a
``--local`` run).
"""
from __future__ import annotations

import collections
import functools
import hashlib
import importlib.util
import io
import os
import re
import sys
import sysconfig
import threading
import zipfile
from collections.abc import Callable, Iterable
from importlib import metadata

from ..core.code_folder import FileEntry, identity, list_files, stat_key
from ..core.contract.code import Bundle, CodeShip, NeededImport, PipSet
from ..core.errors import LaunchError
from ..core.brief import human_bytes
from ..core.options import RunOptions
from .pickling import imports_in_source

__all__ = ["ship_code", "blob", "missing_module_hints", "DEFAULT_WORKDIR_MAX_MB", "MAX_FILES"]

DEFAULT_WORKDIR_MAX_MB = 64.0  # a working directory past this is refused: it is data, not a notebook's files
MAX_FILES = 10_000             # ... or past this many files (a walk stops there: a home folder costs little)
_OURS = "jupyter_torchdist"
_KEEP_BLOBS = 64                # digests the kernel can still serve (the last runs' bundles and wheels)
_TEXT = (".py", ".txt", ".md", ".json", ".yaml", ".yml", ".toml", ".cfg", ".ini", ".csv", ".tsv", ".ipynb", ".html",
         ".xml", ".sh", ".r", ".sql")

_lock = threading.Lock()
_file_sha: dict[str, tuple[int, int, str]] = {}          # a wheel's path -> (size, mtime_ns, sha256 of its bytes)
_imports_of: dict[str, tuple[int, int, frozenset[str]]] = {}  # source path -> (size, mtime_ns, top-level imports)
_sources: collections.OrderedDict[str, Callable[[], bytes]] = collections.OrderedDict()  # digest -> bytes maker
_built: collections.OrderedDict[str, bytes] = collections.OrderedDict()                  # the last few made


# -- what the code imports -----------------------------------------------------------------------------------------
def _source_imports(path: str) -> frozenset[str]:
    """Top-level names a source file imports (absolute imports; cached by size and time)."""
    try:
        st = os.stat(path)
    except OSError:
        return frozenset()
    hit = _imports_of.get(path)
    if hit is not None and hit[:2] == (st.st_size, st.st_mtime_ns):
        return hit[2]
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            names = imports_in_source(f.read())
    except OSError:
        names = set()
    _imports_of[path] = (st.st_size, st.st_mtime_ns, frozenset(names))
    return _imports_of[path][2]


# -- where a name comes from ------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _library_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    dirs = {paths.get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return [os.path.realpath(d) for d in dirs if d]


def _is_library(path: str, libs: list[str]) -> bool:
    parts = path.split(os.sep)
    return "site-packages" in parts or "dist-packages" in parts or any(
        path == d or path.startswith(d + os.sep) for d in libs)


def _user_roots(workdir: str | None) -> list[str]:
    """The kernel's sys.path entries that hold the user's own code (neither the standard library nor installed
    packages), the working directory first."""
    return list(_roots(workdir, os.getcwd(), tuple(sys.path)))


@functools.lru_cache(maxsize=16)
def _roots(workdir: str | None, cwd: str, path: tuple[str, ...]) -> tuple[str, ...]:
    libs, ours = _library_dirs(), _our_root()
    roots: list[str] = []
    for entry in [workdir or "", *path]:
        folder = os.path.realpath(entry or cwd)
        if not os.path.isdir(folder) or _is_library(folder, libs) or folder == ours:
            continue
        if folder not in roots:
            roots.append(folder)
    return tuple(roots)


def _our_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def _origin(name: str) -> list[str]:
    """Where module ``name`` is in this kernel: its file, or its package's folders ([] when it is built in, frozen,
    or nowhere)."""
    mod = sys.modules.get(name)
    spec = getattr(mod, "__spec__", None) if mod is not None else None
    if spec is None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError, AttributeError):
            return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [os.path.realpath(p) for p in spec.submodule_search_locations]
    origin = spec.origin
    return [os.path.realpath(origin)] if origin and os.path.isabs(origin) else []


def _in_roots(name: str, roots: list[str]) -> tuple[str, str] | None:
    """(root, path) of module ``name`` in the user's roots, searched in order (the working directory first, as the
    ranks' sys.path will have it): ``name.py``, or a folder ``name`` with Python files in it (a package)."""
    for root in roots:
        module, folder = os.path.join(root, name + ".py"), os.path.join(root, name)
        if os.path.isfile(module):
            return root, module
        if os.path.isdir(folder) and any(f.endswith(".py") for f in os.listdir(folder)):
            return root, folder
    return None


def _sources_of(path: str) -> list[str]:
    if os.path.isdir(path):
        return [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(".py")][:2000]
    return [path] if path.endswith(".py") else []


def _trace(names: set[str], roots: list[str]) -> tuple[dict[str, set[str]], set[str]]:
    """{root: top-level names of the user's code found there} and the names of installed packages the code imports,
    following imports through the user's sources."""
    found: dict[str, set[str]] = {r: set() for r in roots}
    libraries: set[str] = set()
    todo, seen = list(names), set()
    while todo:
        name = todo.pop()
        if name in seen or name == _OURS or not name.isidentifier():
            continue
        seen.add(name)
        place = _in_roots(name, roots)
        if place is None:
            if name not in sys.stdlib_module_names and _origin(name):
                libraries.add(name)
            continue
        found[place[0]].add(name)
        for source in _sources_of(place[1]):
            todo.extend(_source_imports(source))
    return found, libraries


# -- naming a folder by its listing ----------------------------------------------------------------------------------
def _bundle(root: str, files: list[FileEntry], entries: tuple[str, ...] = ()) -> Bundle:
    listing = stat_key(files)
    digest = hashlib.sha256(f"{root}\0{listing}".encode("utf-8", "surrogateescape")).hexdigest()
    _offer(digest, lambda: _zip(root, files))
    return Bundle(digest=digest, root=root, entries=entries, identity=identity(root),
                  size=sum(e.size for e in files), files=len(files))


def _in_place(root: str) -> Bundle:
    """The working directory of a run whose every rank is on this machine (--local, Spark's local mode): they use it
    where it is, so it is not listed (a big folder would cost every run its walk). Should a rank find it elsewhere
    after all (another mount namespace), its bytes are listed and made when that rank asks."""
    ident = identity(root)
    digest = hashlib.sha256(f"{root}\0in place\0{ident}".encode("utf-8", "surrogateescape")).hexdigest()
    _offer(digest, lambda: _zip(root, list_files(root, most=MAX_FILES + 1)))
    return Bundle(digest=digest, root=root, entries=(), identity=ident, size=0, files=0)


def _zip(root: str, files: list[FileEntry]) -> bytes:
    """The bundle's bytes, as a zip of its files as they are now (one read: every host of the run gets these bytes);
    refused if they are too many to travel (the cap, checked here too for a run that looked local and was not). A
    file gone since the listing is left out."""
    _check_size(root, files, DEFAULT_WORKDIR_MAX_MB)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for e in files:
            info = zipfile.ZipInfo(e.rel)
            info.external_attr = (0o755 if e.executable else 0o644) << 16
            # text shrinks; data files (weights, images, parquet) seldom do, and every run unpacks them again
            info.compress_type = zipfile.ZIP_DEFLATED if e.rel.endswith(_TEXT) else zipfile.ZIP_STORED
            try:
                with open(e.path, "rb") as f:
                    z.writestr(info, f.read())
            except FileNotFoundError:
                continue
    return buf.getvalue()


def _offer(digest: str, make: Callable[[], bytes]) -> None:
    with _lock:
        _sources[digest] = make
        _sources.move_to_end(digest)
        while len(_sources) > _KEEP_BLOBS:
            _sources.popitem(last=False)


def blob(digest: str) -> bytes | None:
    """The bytes of a digest a recent run named (a bundle's zip, a wheel), for a host that lacks them; None if unknown.
    Made once and kept for the next hosts that ask."""
    with _lock:
        data = _built.get(digest)
        make = _sources.get(digest)
    if data is not None or make is None:
        return data
    data = make()
    with _lock:
        _built[digest] = data
        while len(_built) > 2:
            _built.popitem(last=False)
    return data


# -- the working directory -------------------------------------------------------------------------------------------
def _workdir(choice: str | None) -> str | None:
    if choice is not None and choice.lower() == "none":
        return None
    path = os.path.realpath(os.path.expanduser(choice)) if choice else os.getcwd()
    if not os.path.isdir(path):
        raise LaunchError(f"--workdir {choice}: no such folder here. Name a folder on this machine (the ranks run in a "
                          "copy of it), or --workdir none to send none.")
    return path


def _check_size(root: str, files: list[FileEntry], max_mb: float) -> None:
    total = sum(e.size for e in files)
    if total <= max_mb * (1 << 20) and len(files) <= MAX_FILES:
        return
    biggest = ", ".join(f"{e.rel} ({human_bytes(e.size)})" for e in sorted(files, key=lambda e: -e.size)[:5])
    count = f"more than {MAX_FILES}" if len(files) > MAX_FILES else str(len(files))
    raise LaunchError(
        f"the working directory {root} is {'at least ' if len(files) > MAX_FILES else ''}{human_bytes(total)} in "
        f"{count} files, over the "
        f"{max_mb:g} MB (and {MAX_FILES} files) that travel with a run to every rank's host. Biggest: {biggest}. "
        "Name the large files in its .gitignore, run from a smaller folder (--workdir PATH), or send none "
        "(--workdir none) and read data from storage every host reaches.")


# -- --pip and --requirements ------------------------------------------------------------------------------------------
def _pip_set(specs: tuple[str, ...], requirements: str | None) -> PipSet | None:
    if not specs and not requirements:
        return None
    text = ""
    if requirements:
        try:
            with open(os.path.expanduser(requirements), encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise LaunchError(f"--requirements {requirements}: cannot read it here ({exc.strerror})") from None
    wheels: list[tuple[str, str]] = []
    named: list[str] = []
    for spec in specs:
        path = os.path.abspath(os.path.expanduser(spec))
        if os.path.isdir(path):
            raise LaunchError(f"--pip {spec}: a folder cannot travel to the executors; build it into a wheel first "
                              f"(pip wheel --no-deps -w dist {spec}), then --pip dist/<the wheel>")
        if os.path.isfile(path):  # a wheel (or sdist) here travels, named by its bytes
            digest = _sha_of(path)
            _offer(digest, lambda path=path: _read(path))  # type: ignore[misc]
            wheels.append((digest, os.path.basename(path)))
            named.append(f"wheel:{digest}")
        else:
            named.append(spec)
    key = hashlib.sha256(repr((sys.version_info[:2], sys.platform, named, text)).encode()).hexdigest()
    return PipSet(digest=key, specs=tuple(named), wheels=tuple(wheels), requirements=text)


def _sha_of(path: str) -> str:
    """A file's sha256, read again only when its size or time changed."""
    st = os.stat(path)
    hit = _file_sha.get(path)
    if hit is not None and hit[:2] == (st.st_size, st.st_mtime_ns):
        return hit[2]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    _file_sha[path] = (st.st_size, st.st_mtime_ns, h.hexdigest())
    return h.hexdigest()


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# -- what the ranks' Python must have ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def _kernel_version(name: str) -> str:
    """The installed version of distribution ``name`` here ("" if none): read once (4 ms for torch's record)."""
    try:
        return metadata.version(name)
    except (metadata.PackageNotFoundError, ValueError):
        return ""


def _needs(names: set[str]) -> tuple[NeededImport, ...]:
    """The packages the ranks' Python must have, with the kernel's version where the import name is the distribution's
    (most are; reading every distribution's record to map the others costs a third of a second, so only an error
    does that: ``_dist_name``)."""
    out = []
    for name in sorted(names):
        if name in sys.builtin_module_names:
            continue
        version = _kernel_version(name)
        out.append(NeededImport(name=name, dist=name if version else "", version=version))
    return tuple(out)


# -- all of it ---------------------------------------------------------------------------------------------------------
def ship_code(modules: Iterable[str], options: RunOptions, *, travels: bool) -> CodeShip:
    """What goes with a run whose payload needs ``modules`` (``pickling.Packed.modules``): the working directory
    (``--workdir``: the notebook's folder by default, none for no folder), the other user modules it imports, the
    packages to install (``--pip``, ``--requirements``). ``travels``: some ranks may run on other machines, so a folder
    over the cap is refused here, before any rank starts (LaunchError naming its biggest files)."""
    root = _workdir(options.workdir)
    workdir = None
    if root is not None and travels:
        files = list_files(root, most=MAX_FILES + 1)
        _check_size(root, files, DEFAULT_WORKDIR_MAX_MB)
        workdir = _bundle(root, files)
    elif root is not None:
        workdir = _in_place(root)
    roots = _user_roots(root)
    found, libraries = _trace({m.split(".")[0] for m in modules if m and m != "__main__"}, roots)
    bundles = []
    for other, names in found.items():
        if other != root and names:
            entries = tuple(sorted(names))
            bundles.append(_bundle(other, list_files(other, entries, most=MAX_FILES + 1), entries))
    return CodeShip(workdir=workdir, modules=tuple(bundles),
                    pip=_pip_set(options.pip, options.requirements), needs=_needs(libraries))


_MISSING = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")


def missing_module_hints(summaries: Iterable[str], code: CodeShip | None) -> list[str]:
    """A rank could not import a module this kernel can: say where the kernel has it, and how to send it."""
    hints = []
    for name in sorted({m.group(1).split(".")[0] for s in summaries for m in [_MISSING.search(s)] if m}):
        places = _origin(name)
        if not places:
            continue
        where = places[0]
        shipped = code is not None and any(name in b.entries or (not b.entries and where.startswith(b.root + os.sep))
                                           for b in code.bundles)
        if _is_library(where, _library_dirs()):
            how = f"install it on the executors, or send it with the run: --pip {_dist_name(name)}"
        elif shipped:
            how = "it travelled with the run: the rank's own code changed its sys.path or working directory first"
        else:
            how = ("it was not sent, as the run's code never imports it by name (importlib, a string): import it in "
                   f"the cell, or run from its folder (--workdir {os.path.dirname(where)})")
        hints.append(f"`{name}` is in the kernel ({where}) but not on that rank's host: {how}.")
    return hints


def _dist_name(name: str) -> str:
    """The distribution that installs import ``name`` (``sklearn``: scikit-learn); read from every distribution's
    record, so only on an error's path."""
    return (metadata.packages_distributions().get(name) or [name])[0]
