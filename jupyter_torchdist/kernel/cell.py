"""A notebook cell as a function that cloudpickle can ship.

The function's globals are the notebook namespace and its module is ``__main__``,
so cloudpickle captures by value exactly the globals the cell uses, and nothing else.
Line numbers stay the cell's own, so remote tracebacks point at the user's lines.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import itertools
import re
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable

from ..core.travel import register_source
from ..rank.kept_payload import KeptCell, compile_kept

__all__ = ["CellFunction", "CellSyntaxError", "compile_cell", "kept_cell", "names_read"]

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
        # IPython syntax (!cmd, magics) calls get_ipython(): the ranks get their own (rank/kept_payload.py: get_ipython)
        body.insert(0, ast.copy_location(ast.ImportFrom(
            module="jupyter_torchdist.rank.kept_payload", names=[ast.alias(name="get_ipython")], level=0), body[0]))
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


# -- a cell for kept ranks ---------------------------------------------------------------------------------------------
# A notebook cell for kept ranks, built in the kernel: checked, and shipped with the notebook values it reads.
#
# The cell runs on the ranks as module code in their own namespace (``rank.main.serve_cells``). Here it is compiled
# once to catch syntax errors with the notebook's line numbers, and to find the global names it reads:
# those the ranks' own code has not defined are taken from the notebook and shipped (cloudpickle).
# IPython's own names in a notebook namespace: never shipped (they are the kernel's, not the user's).
_IPYTHON_NAMES = re.compile(r"^(_+|_\d+|_i+\d*|_oh|_dh|_ih|In|Out|get_ipython|exit|quit)$")


def names_read(code: types.CodeType) -> set[str]:
    """Every global name the code (and any function or class defined in it) may read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= names_read(const)
    return names


def _check(source: str, filename: str) -> None:
    tree = ast.parse(source, filename=filename)
    for node in tree.body:
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom, ast.Await)) or (
                isinstance(node, ast.Expr) and isinstance(node.value, (ast.Yield, ast.YieldFrom, ast.Await))):
            raise CellSyntaxError(
                "a --keep cell runs as module code on the ranks, like a notebook cell: a top-level "
                "`return`, `yield` or `await` has no meaning there; end the cell with an expression for its value",
                (filename, node.lineno + 1, node.col_offset + 1, None, None, None))


def kept_cell(source: str, filename: str, notebook: dict[str, Any], rank_names: set[str],
              hidden: set[str] | frozenset[str] = frozenset()) -> KeptCell:
    """The cell, with the notebook values it reads that the ranks do not define (and are not IPython's)."""
    try:
        _check(source, filename)
        code = compile_kept(source, filename, first_line=2)
    except CellSyntaxError:
        raise
    except SyntaxError as exc:
        lineno = None if exc.lineno is None else exc.lineno + 1
        raise CellSyntaxError(exc.msg, (filename, lineno, exc.offset, exc.text, None, None)) from None
    wanted = names_read(code) - rank_names - set(hidden)
    shipped = {name: notebook[name] for name in sorted(wanted)
               if name in notebook and not _IPYTHON_NAMES.match(name)
               and not (hasattr(builtins, name) and notebook[name] is getattr(builtins, name))}
    return KeptCell(source, filename, first_line=2, shipped=shipped)
