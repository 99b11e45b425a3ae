"""A sweep's combination on the rank: the cell's function with the sweep's names set as its globals.

Light on purpose (no torch, no channel): the kernel imports it to build a sweep's payloads. On the rank the cell's
function was unpickled with a globals dict of its own (cloudpickle gives the notebook functions it shipped together
one such dict), so setting the names there lets the cell, and the notebook functions it calls, read them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["WithGlobals"]


@dataclass(frozen=True)
class WithGlobals:
    fn: Callable[..., Any]
    names: dict[str, Any] = field(default_factory=dict)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        space = getattr(self.fn, "__globals__", None)
        if isinstance(space, dict):
            space.update(self.names)
        return self.fn(*args, **kwargs)
