"""What a rank's Python must match in the kernel's: compared in each rank's task before the rank starts.

A rank unpickles the kernel's cell (cloudpickle), runs torch collectives with its peers and speaks the kernel's
channel: a different Python minor version, torch, cloudpickle or jupyter-torchdist fails in confusing ways later
(a pickle error, a hang in a collective), so an executor that differs is refused up front, by name.
"""
from __future__ import annotations

import sys
from importlib import metadata

__all__ = ["local_versions", "differences", "unfit"]

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
