"""A notebook cell as a function that cloudpickle can ship.

The function's globals are the notebook namespace and its module is ``__main__``,
so cloudpickle captures by value exactly the globals the cell uses, and nothing else.
Line numbers stay the cell's own, so remote tracebacks point at the user's lines.
"""
from __future__ import annotations

import ast
import itertools
import inspect
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable

from ..core._sources import register_source

__all__ = ["CellFunction", "CellSyntaxError", "compile_cell"]

FUNC_NAME = "_distributed_cell"
_counter = itertools.count(1)


class CellSyntaxError(SyntaxError):
    """The cell is not valid Python (after IPython's transformations)."""


@dataclass(frozen=True)
class CellFunction:
    fn: Callable[[], Any]
    source: str
    filename: str


def _wrap(tree: ast.Module) -> ast.Module:
    body = list(tree.body) or [ast.Pass()]
    last = body[-1]
    if isinstance(last, ast.Expr):
        body[-1] = ast.copy_location(ast.Return(value=last.value), last)
    for node in body:
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            raise CellSyntaxError(
                f"line {node.lineno}: `global`/`nonlocal` at the top of a %%distribute cell has no meaning "
                "on the ranks; return the value instead (or use -o NAME to store it)."
            )
    if any(isinstance(n, ast.Name) and n.id == "get_ipython" for n in ast.walk(ast.Module(body=body, type_ignores=[]))):
        # IPython syntax (!cmd, magics) calls get_ipython(): the ranks get their own (rank/shell.py)
        body.insert(0, ast.copy_location(ast.ImportFrom(
            module="jupyter_torchdist.rank.shell", names=[ast.alias(name="get_ipython")], level=0), body[0]))
    extra: dict[str, Any] = {"type_params": []} if sys.version_info >= (3, 12) else {}
    func = ast.FunctionDef(
        name=FUNC_NAME,
        args=ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[],
                           kwarg=None, defaults=[]),
        body=body, decorator_list=[], returns=None, **extra,
    )
    ast.copy_location(func, body[0])
    module = ast.Module(body=[func], type_ignores=[])
    return ast.fix_missing_locations(module)


def compile_cell(source: str, namespace: dict[str, Any], *, filename: str | None = None,
                 header: str | None = None) -> CellFunction:
    """Compile (already IPython-transformed) cell source into a zero-argument function.

    ``header`` is the cell's magic line: it stays line 1 so tracebacks use the notebook's numbering.
    """
    filename = filename or f"<distribute-cell-{next(_counter)}>"
    offset = 0 if header is None else 1
    try:
        tree = ast.parse(source, filename=filename)
        ast.increment_lineno(tree, offset)
        code = compile(_wrap(tree), filename, "exec")
    except CellSyntaxError:
        raise
    except SyntaxError as exc:
        lineno = None if exc.lineno is None else exc.lineno + offset
        end = None if exc.end_lineno is None else exc.end_lineno + offset
        err = CellSyntaxError(exc.msg, (filename, lineno, exc.offset, exc.text, end, exc.end_offset))
        raise err from None
    fn_code = next(c for c in code.co_consts if isinstance(c, types.CodeType) and c.co_name == FUNC_NAME)
    if fn_code.co_flags & (inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR | inspect.CO_COROUTINE):
        raise CellSyntaxError("a %%distribute cell cannot `yield` or `await` at its top level; "
                              "collect the values in a list and return it")
    fn_code = fn_code.replace(co_name="<cell>")
    if sys.version_info >= (3, 11):
        fn_code = fn_code.replace(co_qualname="<cell>")
    fn = types.FunctionType(fn_code, namespace, FUNC_NAME)
    fn.__module__ = "__main__"
    fn.__qualname__ = FUNC_NAME
    full = source if header is None else header.rstrip("\n") + "\n" + source
    register_source(filename, full)
    return CellFunction(fn=fn, source=full, filename=filename)
