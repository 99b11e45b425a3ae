"""``get_ipython()`` on a rank: what IPython-transformed cell code calls (``!cmd``, ``x = !cmd``, magics).

The kernel's shell cannot travel to the ranks, so cells that use IPython syntax get this one instead:
shell commands run on the rank's host (their output is captured like any other), and line or cell
magics run in a real IPython shell created on first use.
"""
from __future__ import annotations

import subprocess
from typing import Any

__all__ = ["get_ipython", "RankShell"]


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
