"""A sweep's combination on the rank: the cell's function with the sweep's names set as its globals.

Light on purpose (no torch, no channel): the kernel imports it to build a sweep's payloads. On the rank the cell's
function was unpickled with a globals dict of its own (cloudpickle gives the notebook functions it shipped together
one such dict), so setting the names there lets the cell, and the notebook functions it calls, read them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["WithGlobals", "PackedCall"]


@dataclass(frozen=True)
class WithGlobals:
    fn: Callable[..., Any]
    names: dict[str, Any] = field(default_factory=dict)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        space = getattr(self.fn, "__globals__", None)
        if isinstance(space, dict):
            space.update(self.names)
        return self.fn(*args, **kwargs)


@dataclass(frozen=True)
class PackedCall:
    """A detached sweep's member on the rank. Its runner never unpickles the notebook's cell or function (that would
    need the notebook's imports in a process that only supervises): it hands on the kernel's packed ``(fn, args,
    kwargs)`` as it came, with the member's parameters, set as the cell's globals (``as_globals``, a cell's sweep) or
    given as keyword arguments (a function's)."""

    payload: bytes
    params: dict[str, Any] = field(default_factory=dict)
    as_globals: bool = True

    def __call__(self) -> Any:
        import cloudpickle

        fn, args, kwargs = cloudpickle.loads(self.payload)
        if self.as_globals:
            return WithGlobals(fn, self.params)(*args, **kwargs)
        return fn(*args, **{**kwargs, **self.params})
