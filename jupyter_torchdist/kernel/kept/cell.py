"""A notebook cell for kept ranks, built in the kernel: checked, and shipped with the notebook values it reads.

The cell runs on the ranks as module code in their own namespace (``rank.kept``). Here it is compiled
once to catch syntax errors with the notebook's line numbers, and to find the global names it reads:
those the ranks' own code has not defined are taken from the notebook and shipped (cloudpickle).
"""
from __future__ import annotations

import ast
import builtins
import re
import types
from typing import Any

from ...rank.kept_payload import KeptCell, compile_kept
from ..cell import CellSyntaxError

__all__ = ["kept_cell", "names_read"]

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
