"""Which backend runs a run: chosen once, from what the session is and what the user asked for.

Backends are registered by name with a ``claims(options)`` test, in priority order; the first that
claims a run gets it. A backend's module is imported only when it is chosen, so registering Spark
does not import pyspark.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from ..core.options import RunOptions
from .base import Launcher

__all__ = ["Backend", "register", "unregister", "backend_for", "backends"]


@dataclass(frozen=True)
class Backend:
    name: str
    target: str | type[Launcher]            # the class, or "package.module:Class" to import it only when chosen
    claims: Callable[[RunOptions], bool]    # does this backend take this run?
    priority: int = 0                       # higher first; the fallback has the lowest

    def launcher(self) -> Launcher:
        cls: object = self.target
        if isinstance(self.target, str):
            module, _, attr = self.target.partition(":")
            cls = getattr(importlib.import_module(module), attr)
        if not (isinstance(cls, type) and issubclass(cls, Launcher)):
            raise TypeError(f"backend {self.name!r}: {self.target} is not a Launcher subclass")
        return cls()


_backends: list[Backend] = []


def register(name: str, target: str | type[Launcher], claims: Callable[[RunOptions], bool], *,
             priority: int = 0) -> None:
    """Add (or replace) a backend. ``claims`` must be cheap and must not start anything."""
    unregister(name)
    _backends.append(Backend(name, target, claims, priority))
    _backends.sort(key=lambda b: -b.priority)


def unregister(name: str) -> None:
    _backends[:] = [b for b in _backends if b.name != name]


def backends() -> tuple[Backend, ...]:
    return tuple(_backends)


def backend_for(options: RunOptions) -> Backend:
    for backend in _backends:
        if backend.claims(options):
            return backend
    raise LookupError(f"no launcher backend takes this run (registered: {[b.name for b in _backends]})")
