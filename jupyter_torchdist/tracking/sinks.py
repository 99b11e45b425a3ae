"""Each tracker's sink, found by its name in the registry (``core/trackers.py``: the module that holds it), and what
every part asks of the trackers a run records to: where its records go and what they add, resolved when the run is
recorded (``destinations``, ``extras``), and how the view and messages name them (``note``)."""
from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from collections.abc import Iterable
from typing import Any

from ..core.trackers import REGISTRY
from .sink import Sink

__all__ = ["sink_class", "new_sinks", "destinations", "extras", "address", "imported", "prefetch"]

_IMPORTING = threading.Lock()


def imported(name: str) -> None:
    """The tracker's package imported, one thread at a time: the shipper's lanes and the kernel's own thread may all
    reach for it at once, and a package such as MLflow, imported by two threads at once, can deadlock on its own
    circular imports or leave a module half made."""
    package = REGISTRY[name].package
    with _IMPORTING:
        importlib.import_module(package)


def prefetch(names: Iterable[str]) -> threading.Thread | None:
    """The trackers' packages imported now on a thread of their own (MLflow takes about 1.3 s of CPU), so that a
    notebook whose runs are tracked by default has them before its first run asks, not on that cell's clock. A
    package not installed is left alone: the run's own check says so, with what to install."""
    wanted = [n for n in names if n in REGISTRY and REGISTRY[n].package not in sys.modules
              and importlib.util.find_spec(REGISTRY[n].package) is not None]
    if not wanted:
        return None
    thread = threading.Thread(target=_import_quietly, args=(wanted,), name="jupyter-torchdist-tracker-import",
                              daemon=True)
    thread.start()
    return thread


def _import_quietly(names: list[str]) -> None:
    for name in names:
        try:
            imported(name)
            sink_class(name)
        except Exception:   # a broken install: the run's own check (check_environment) says what is wrong
            pass


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
