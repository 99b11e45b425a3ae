"""Pickle the cell function with what it uses (cloudpickle, by value), and say clearly what cannot travel."""
from __future__ import annotations

import ast
import builtins
import dis
import io
import types
from dataclasses import dataclass
from typing import Any, Callable

from .cell import names_read
from ..core.travel import Pickler, dumps
from ..core.brief import human_bytes
from ..data.frame_handles import reduce_dataframe
from ..core.errors import CaptureError

__all__ = ["pack", "Packed", "referenced_globals"]


@dataclass(frozen=True)
class Packed:
    """A run's pickled work, and the modules it needs on the ranks: those it imports (its code objects' and shipped
    sources' imports) and those its objects are pickled by reference from (``mymodel.Net``). ``code_ship`` decides
    from them what travels."""

    data: bytes
    modules: frozenset[str] = frozenset()


class _Pickler(Pickler):
    """Ours (code objects keep their filename), with each Spark DataFrame sent as a handle (``data.handles``)
    instead of failing."""

    def reducer_override(self, obj: Any) -> Any:
        reduced = reduce_dataframe(obj)
        return reduced if reduced is not None else super().reducer_override(obj)


class _Recording(_Pickler):
    """``_Pickler`` that also notes every module the payload needs on the ranks (``Packed.modules``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.modules: set[str] = set()

    def reducer_override(self, obj: Any) -> Any:
        modules = self.modules
        if isinstance(obj, types.ModuleType):
            modules.add(obj.__name__)
        elif isinstance(obj, types.CodeType):
            for ins in dis.get_instructions(obj):
                if ins.opname == "IMPORT_NAME" and isinstance(ins.argval, str):
                    modules.add(ins.argval)
        elif isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
            modules.add(str(getattr(obj, "__module__", None) or ""))
        else:
            modules.add(type(obj).__module__)
            source = getattr(obj, "source", None)
            if isinstance(source, str) and type(obj).__module__.startswith("jupyter_torchdist.rank"):
                modules.update(imports_in_source(source))  # a kept cell, a script: their source travels
        return super().reducer_override(obj)


def imports_in_source(source: str) -> set[str]:
    """Top-level names a source text imports (absolute imports); none if it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _dumps(obj: Any) -> bytes:
    return dumps(obj, _Pickler)


def referenced_globals(fn: Callable[..., Any]) -> dict[str, Any]:
    """The notebook globals a function refers to (what cloudpickle will capture by value)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return {}
    glb = getattr(fn, "__globals__", {})
    return {name: glb[name] for name in sorted(names_read(code))
            if name in glb and not (hasattr(builtins, name) and glb[name] is getattr(builtins, name))}


def _type_name(value: Any) -> str:
    t = type(value)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _is_notebook(value: Any) -> bool:
    """A function or class defined in the notebook: cloudpickle ships it by value, with its globals."""
    return isinstance(value, (types.FunctionType, type)) and getattr(value, "__module__", None) == "__main__"


def _notebook_functions(value: Any) -> list[Callable[..., Any]]:
    if isinstance(value, types.FunctionType):
        return [value]
    out: list[Callable[..., Any]] = []
    for attr in vars(value).values():  # a class: its methods (plain, static and class methods)
        fn = getattr(attr, "__func__", attr)
        if isinstance(fn, types.FunctionType):
            out.append(fn)
    return out


def _captured(fn: Callable[..., Any], seen: set[int]) -> list[tuple[str, Any]]:
    """(name, value) for each notebook variable ``fn`` captures, looking through notebook functions and
    classes to the variables they use themselves ("helper -> lock")."""
    if id(fn) in seen:
        return []
    seen.add(id(fn))
    out: list[tuple[str, Any]] = []
    for name, value in referenced_globals(fn).items():
        if isinstance(value, types.ModuleType):
            continue
        inner = [(f"{name} -> {n}", v) for f in _notebook_functions(value) for n, v in _captured(f, seen)] \
            if _is_notebook(value) else []
        out.extend(inner or [(name, value)])
    return out


def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(f"argument {i}", v) for i, v in enumerate(args)] + [(f"argument {k}=", v) for k, v in kwargs.items()]


def _parts(value: Any) -> list[tuple[str, Any]]:
    """An object's own attributes (instances) or class attributes (notebook classes), by name."""
    if isinstance(value, type):
        return [(k, v) for k, v in vars(value).items()
                if not k.startswith("__") and not isinstance(getattr(v, "__func__", v), types.FunctionType)]
    attrs = getattr(value, "__dict__", None)
    return list(attrs.items()) if isinstance(attrs, dict) else []


def _narrow(name: str, value: Any, exc: BaseException, depth: int = 2) -> tuple[str, Any, BaseException]:
    """From an unpicklable object down to the attribute that is the real culprit (``model.lock``)."""
    if depth == 0 or isinstance(value, types.ModuleType):
        return name, value, exc
    for attr, part in _parts(value):
        try:
            _dumps(part)
        except Exception as inner:
            return _narrow(f"{name}.{attr}", part, inner, depth - 1)
    return name, value, exc


def _blame(fn: Callable[..., Any], args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None,
           named: dict[str, Any] | None = None) -> tuple[str, Any, BaseException] | None:
    """The variable (or argument) that makes pickling fail, looking inside notebook functions, classes and
    objects."""
    for name, value in _candidates(fn, args, kwargs, named):
        try:
            _dumps(value)
        except Exception as exc:
            return _narrow(name, value, exc)
    return None


def _candidates(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None,
                named: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """Everything that travels, by the name the user knows it by."""
    return list((named or {}).items()) + _arguments(args, kwargs or {}) + _captured(fn, set())


def _sizes(fn: Callable[..., Any], args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None,
           named: dict[str, Any] | None = None) -> list[tuple[str, int]]:
    sizes = []
    for name, value in _candidates(fn, args, kwargs, named):
        try:
            sizes.append((name, len(_dumps(value))))
        except Exception:
            continue
    return sorted(sizes, key=lambda item: -item[1])


def pack(fn: Callable[..., Any], args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None,
         *, max_bytes: int, named: dict[str, Any] | None = None) -> Packed:
    """Pickle ``(fn, args, kwargs)`` for the ranks, or raise a CaptureError that names the culprit.

    ``named``: values ``fn`` carries that the user knows by name (a kept cell's shipped notebook values).
    """
    kwargs = kwargs or {}
    buf = io.BytesIO()
    pickler = _Recording(buf, protocol=5)
    try:
        pickler.dump((fn, args, kwargs))
        data = buf.getvalue()
    except Exception as exc:
        culprit = _blame(fn, args, kwargs, named)
        if culprit is None:
            raise CaptureError(f"could not pickle the cell or its arguments for the ranks: "
                               f"{type(exc).__name__}: {exc}") from None
        name, value, inner = culprit
        what = f"the call's {name}" if name.startswith("argument") else f"the notebook variable `{name}`"
        raise CaptureError(
            f"the cell uses {what} ({_type_name(value)}), which cannot be sent to the ranks: "
            f"{type(inner).__name__}: {inner}. "
            "Create it inside the cell instead (or pass what it holds, e.g. a path or plain values)."
        ) from None
    if len(data) > max_bytes:
        biggest = ", ".join(f"`{n}` {human_bytes(s)}" for n, s in _sizes(fn, args, kwargs, named)[:5]) \
            or "(none found)"
        raise CaptureError(
            f"the captured payload is {human_bytes(len(data))}, over the limit of {human_bytes(max_bytes)} "
            f"(--max-payload-mb). Biggest captured variables: {biggest}. Load large data inside the cell "
            "(from a path), or raise the limit with --max-payload-mb."
        )
    return Packed(data, frozenset(m for m in pickler.modules if m))

