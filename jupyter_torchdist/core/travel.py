"""How the cell travels between the kernel and its ranks and stays the user's: pickled with each code object's own
filename, its source lines registered for tracebacks on both sides, and the versions a rank's Python must match for
the kernel's pickles and collectives to mean the same there."""
from __future__ import annotations

import io
import linecache
import sys
import types
from importlib import metadata
from typing import Any

import cloudpickle

__all__ = ["Pickler", "dumps", "code_named", "register_source", "local_versions", "differences", "unfit"]


# -- pickling: cloudpickle, code objects keep their filename -----------------------------------------------------------
# cloudpickle as every side of a run uses it: code objects keep their filename.
#
# cloudpickle 3.1.3 and later write ``<dynamic-code>`` as the filename of every code object it ships, which
# cuts a rank's traceback (and a data transform's) off from the cell lines registered under ``Cell In[5]``
# (``_sources``). The pickler here keeps the real filename; everything else is cloudpickle's.
_code_reduce = getattr(cloudpickle.cloudpickle, "_code_reduce", None)


def code_named(args: tuple[Any, ...], filename: str) -> types.CodeType:
    """Rebuild a pickled code object under its own filename."""
    return types.CodeType(*args).replace(co_filename=filename)


class Pickler(cloudpickle.Pickler):  # type: ignore[misc]
    """cloudpickle's pickler, keeping each code object's filename."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, types.CodeType) and _code_reduce is not None:
            _, args = _code_reduce(obj)
            return code_named, (args, obj.co_filename)
        return super().reducer_override(obj)


def dumps(obj: Any, pickler: type[Pickler] = Pickler) -> bytes:
    """Pickle ``obj`` (protocol 5) with ``pickler``."""
    buf = io.BytesIO()
    pickler(buf, protocol=5).dump(obj)
    return buf.getvalue()


# -- source text for tracebacks ----------------------------------------------------------------------------------------
# Source text for tracebacks: cells and scripts run from memory, so ``linecache`` is told their lines.
#
# Both sides call it: the kernel when it compiles a cell, each rank before it runs one, so a
# traceback shows the user's own lines wherever it is formatted.
def register_source(filename: str, source: str) -> None:
    """Make tracebacks able to show ``source``'s lines under ``filename``."""
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)


# -- what a rank's Python must match in the kernel's -------------------------------------------------------------------
# What a rank's Python must match in the kernel's: compared in each rank's task before the rank starts.
#
# A rank unpickles the kernel's cell (cloudpickle), runs torch collectives with its peers and speaks the kernel's
# channel: a different Python minor version, torch, cloudpickle or jupyter-torchdist fails in confusing ways later
# (a pickle error, a hang in a collective), so an executor that differs is refused up front, by name.
_PACKAGES = ("torch", "cloudpickle", "jupyter-torchdist")
_cached: dict[str, str] = {}


def _version(name: str) -> str:
    try:
        return metadata.version(name).split("+")[0]  # local build tags (+cpu) may differ
    except metadata.PackageNotFoundError:
        return "missing"


def local_versions(extra: tuple[str, ...] = ()) -> dict[str, str]:
    """This Python's version (major.minor) and the installed versions of the packages a rank needs (read from
    their metadata: no import, so the kernel need not import torch for it), and of ``extra`` ones a run's
    framework needs (``deepspeed`` for DeepspeedTorchDistributor)."""
    for name in ("python", *_PACKAGES, *extra):
        if name not in _cached:
            _cached[name] = f"{sys.version_info[0]}.{sys.version_info[1]}" if name == "python" else _version(name)
    return {name: _cached[name] for name in ("python", *_PACKAGES, *extra)}


def differences(kernel: dict[str, str], here: dict[str, str]) -> list[str]:
    """What differs, in words (``torch 2.13.0 here, 2.12.1 in the kernel``); empty when the rank may run."""
    return [f"{name} {here.get(name, 'missing')} here, {want} in the kernel"
            for name, want in kernel.items() if here.get(name) != want]


def unfit(kernel: tuple[tuple[str, str], ...]) -> str | None:
    """Why this Python may not run a rank of a kernel with ``kernel`` versions, in one line; None when it may."""
    if not kernel:
        return None
    diff = differences(dict(kernel), local_versions(tuple(name for name, _ in kernel)))
    if not diff:
        return None
    import socket

    return (f"this executor's Python differs from the kernel's ({'; '.join(diff)}; it ran {sys.executable} on "
            f"{socket.gethostname()}): install the kernel's versions for that Python, or point the executors at a "
            "Python that has them (PYSPARK_PYTHON in the kernel's environment before the session is created, or "
            "spark.pyspark.python on the session)")
