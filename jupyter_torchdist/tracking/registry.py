"""Each tracker's sink, found by its name in the registry (``core/trackers.py``: the module that holds it), and what
every part asks of the trackers a run records to: where its records go and what they add, resolved when the run is
recorded (``destinations``, ``extras``), and how the view and messages name them (``note``)."""
from __future__ import annotations

import importlib
import threading
from typing import Any

from ..core.trackers import REGISTRY
from .sink import Sink

__all__ = ["sink_class", "new_sinks", "destinations", "extras", "address", "imported"]

_IMPORTING = threading.Lock()


def imported(name: str) -> None:
    """The tracker's package imported, one thread at a time: the shipper's lanes and the kernel's own thread may all
    reach for it at once, and a package such as MLflow, imported by two threads at once, can deadlock on its own
    circular imports or leave a module half made."""
    package = REGISTRY[name].package
    with _IMPORTING:
        importlib.import_module(package)


def sink_class(name: str) -> type[Sink]:
    """The sink of the tracker ``name`` (its module imported now: a tracker's package only when it is used)."""
    module = importlib.import_module(f"{__package__}.{REGISTRY[name].module}")
    found = [v for v in vars(module).values()
             if isinstance(v, type) and issubclass(v, Sink) and v is not Sink and v.name == name]
    if len(found) != 1:
        raise LookupError(f"tracking/{REGISTRY[name].module}.py holds no sink named {name!r}")
    return found[0]


def new_sinks() -> dict[str, Sink]:
    """One sink per tracker, for a shipper (a sink keeps its clients and open runs; each imports its tracker's
    package at its first record)."""
    return {name: sink_class(name)() for name in REGISTRY}


def destinations(track: tuple[str, ...], options: Any) -> dict[str, dict[str, Any]]:
    """Where each tracker of a run records, as this kernel resolves it now."""
    for name in track:
        imported(name)
    return {name: sink_class(name).destination(options) for name in track}


def extras(track: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """What each tracker adds to a run's record when it is recorded."""
    out = {}
    for name in track:
        imported(name)
        added = sink_class(name).extras()
        if added:
            out[name] = added
    return out


def address(name: str, settings: dict[str, Any]) -> str:
    """Where ``name``'s records go, as one line (the shipper's queue for it, messages, the doctor)."""
    if name not in REGISTRY:
        return ""
    return sink_class(name).address(settings)
