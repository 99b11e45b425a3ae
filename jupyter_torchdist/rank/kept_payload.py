"""What a kept cell is on the ranks, and the namespace it runs in. Built by the kernel, run by the rank.

Light on purpose (no torch, no channel): the kernel imports it to build ``KeptCell`` payloads.
"""
from __future__ import annotations

import ast
import subprocess
import types
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

__all__ = ["KeptCell", "KeptPostMortem", "Namespace", "run_job", "compile_kept", "get_ipython", "RankShell"]

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


# -- get_ipython() on a rank -------------------------------------------------------------------------------------------
# ``get_ipython()`` on a rank: what IPython-transformed cell code calls (``!cmd``, ``x = !cmd``, magics).
#
# The kernel's shell cannot travel to the ranks, so cells that use IPython syntax get this one instead:
# shell commands run on the rank's host (their output is captured like any other), and line or cell
# magics run in a real IPython shell created on first use.
class RankShell:
    _real: Any = None

    def system(self, cmd: str) -> int:
        """``!cmd``: run it in a shell; its output goes to this rank's captured stdout/stderr."""
        return subprocess.call(cmd, shell=True)

    def getoutput(self, cmd: str, split: bool = True, depth: int = 0) -> Any:
        """``x = !cmd``: the command's output lines."""
        out = subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout
        if not split:
            return out
        from IPython.utils.text import SList

        return SList(out.splitlines())

    def _shell(self) -> Any:
        if RankShell._real is None:
            from IPython.core.interactiveshell import InteractiveShell

            RankShell._real = InteractiveShell.instance()
        return RankShell._real

    def run_line_magic(self, name: str, line: str, _stack_depth: int = 1) -> Any:
        return self._shell().run_line_magic(name, line)

    def run_cell_magic(self, name: str, line: str, cell: str) -> Any:
        return self._shell().run_cell_magic(name, line, cell)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shell(), name)


_shell = RankShell()


def get_ipython() -> RankShell:
    return _shell
