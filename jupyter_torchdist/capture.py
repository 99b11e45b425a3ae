"""Pickle the cell function with what it uses, and say clearly what cannot travel."""
from __future__ import annotations

import builtins
import types
from typing import Any, Callable

import cloudpickle

__all__ = ["CaptureError", "pack", "unpack", "referenced_globals", "human_bytes"]


class CaptureError(Exception):
    """The cell uses something that cannot be sent to the ranks; the message names it."""


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def referenced_globals(fn: Callable[..., Any]) -> dict[str, Any]:
    """The notebook globals a function refers to (what cloudpickle will capture by value)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return {}
    glb = getattr(fn, "__globals__", {})
    return {name: glb[name] for name in sorted(_code_names(code))
            if name in glb and not (hasattr(builtins, name) and glb[name] is getattr(builtins, name))}


def _blame(fn: Callable[..., Any], seen: set[int] | None = None) -> tuple[str, Any, BaseException] | None:
    """Find the variable (following notebook functions) that makes pickling fail."""
    seen = seen if seen is not None else set()
    if id(fn) in seen:
        return None
    seen.add(id(fn))
    for name, value in referenced_globals(fn).items():
        if isinstance(value, types.ModuleType):
            continue
        try:
            cloudpickle.dumps(value)
        except Exception as exc:
            if isinstance(value, types.FunctionType) and value.__module__ == "__main__":
                inner = _blame(value, seen)
                if inner is not None:
                    return (f"{name} -> {inner[0]}", inner[1], inner[2])
            return name, value, exc
    return None


def _sizes(fn: Callable[..., Any]) -> list[tuple[str, int]]:
    sizes = []
    for name, value in referenced_globals(fn).items():
        if isinstance(value, types.ModuleType):
            continue
        try:
            sizes.append((name, len(cloudpickle.dumps(value))))
        except Exception:
            continue
    return sorted(sizes, key=lambda item: -item[1])


def pack(fn: Callable[..., Any], args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None,
         *, max_bytes: int) -> bytes:
    """Pickle ``(fn, args, kwargs)`` for the ranks, or raise a CaptureError that names the culprit."""
    try:
        data = cloudpickle.dumps((fn, args, kwargs or {}), protocol=5)
    except Exception as exc:
        culprit = _blame(fn)
        if culprit is None:
            raise CaptureError(f"could not pickle the cell or its arguments for the ranks: "
                               f"{type(exc).__name__}: {exc}") from None
        name, value, inner = culprit
        raise CaptureError(
            f"the cell uses the notebook variable `{name}` ({type(value).__module__}.{type(value).__qualname__}), "
            f"which cannot be sent to the ranks: {type(inner).__name__}: {inner}. "
            "Create it inside the cell instead (or pass what it holds, e.g. a path or plain values)."
        ) from None
    if len(data) > max_bytes:
        biggest = ", ".join(f"`{n}` {human_bytes(s)}" for n, s in _sizes(fn)[:5]) or "(none found)"
        raise CaptureError(
            f"the captured payload is {human_bytes(len(data))}, over the limit of {human_bytes(max_bytes)}. "
            f"Biggest captured variables: {biggest}. Load large data inside the cell (from a path), "
            "or raise the limit with --max-payload-mb."
        )
    return data


def unpack(data: bytes) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    fn, args, kwargs = cloudpickle.loads(data)
    return fn, args, kwargs
