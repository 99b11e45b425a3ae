"""What a kept cell is on the ranks, and the namespace it runs in. Built by the kernel, run by the rank.

Light on purpose (no torch, no channel): the kernel imports it to build ``KeptCell`` payloads.
"""
from __future__ import annotations

import ast
import types
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

__all__ = ["KeptCell", "KeptPostMortem", "Namespace", "run_job", "compile_kept"]

_VALUE = "__jtd_cell_value__"


def compile_kept(source: str, filename: str, first_line: int) -> types.CodeType:
    """Module code for ``source`` whose trailing expression, if any, is stored as the cell's value."""
    tree = ast.parse(source, filename=filename)
    ast.increment_lineno(tree, first_line - 1)
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body[-1]
        tree.body[-1] = ast.copy_location(
            ast.Assign(targets=[ast.Name(id=_VALUE, ctx=ast.Store())], value=last.value), last)
    return compile(ast.fix_missing_locations(tree), filename, "exec")


@dataclass(frozen=True)
class KeptCell:
    """A notebook cell for kept ranks (IPython-transformed source, its magic line excluded)."""

    source: str
    filename: str
    first_line: int = 2                     # the magic line is line 1 in the notebook's numbering
    shipped: dict[str, Any] = field(default_factory=dict)  # notebook values the ranks do not define

    def __call__(self, ns: Namespace) -> Any:
        ns.take(self.shipped)
        code = compile_kept(self.source, self.filename, self.first_line)
        ns.globals.pop(_VALUE, None)
        exec(code, ns.globals)
        return ns.globals.pop(_VALUE, None)


@dataclass(frozen=True)
class KeptPostMortem:
    """``%distribute_debug``: the post-mortem of the last failed kept cell, on the rank that failed."""

    rank: int

    def __call__(self) -> None:
        from .debugger import post_mortem_saved

        post_mortem_saved(self.rank)


class Namespace:
    """A rank's globals across kept cells, and which of them came from the notebook rather than the rank."""

    def __init__(self) -> None:
        from .shell import get_ipython

        self.globals: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__,
                                        "get_ipython": get_ipython}
        self._shipped: dict[str, int] = {}  # name -> id of the notebook value we set it to

    def take(self, shipped: dict[str, Any]) -> None:
        """Notebook values, each only where the rank's own code has not defined that name."""
        own = self.own_names()
        for name, value in shipped.items():
            if name not in own:
                self.globals[name] = value
                self._shipped[name] = id(value)

    def own_names(self) -> set[str]:
        """Names the rank's code defined (a shipped name the code reassigned counts as its own)."""
        return {k for k, v in self.globals.items()
                if not k.startswith("__") and k != "get_ipython" and self._shipped.get(k) != id(v)}


def run_job(payload: bytes, ns: Namespace) -> Any:
    """A kept payload is ``pickling.pack``'s (fn, args, kwargs): a ``KeptCell`` runs in the namespace,
    any other function (``Ranks.run``) is called with its arguments."""
    fn, args, kwargs = cloudpickle.loads(payload)
    return fn(ns) if isinstance(fn, KeptCell) else fn(*args, **kwargs)
