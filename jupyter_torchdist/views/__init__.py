"""Views draw run snapshots (see ``state.RunState.snapshot``); they never see messages or sockets."""
from __future__ import annotations

from typing import Any

__all__ = ["NullView", "make_view"]


class NullView:
    """Draws nothing (``--quiet`` and the plain Python API)."""
    log_tail = 0

    def start(self, snapshot: dict[str, Any]) -> None:
        pass

    def update(self, snapshot: dict[str, Any]) -> None:
        pass

    def finish(self, snapshot: dict[str, Any]) -> None:
        pass


def make_view(shell: Any, quiet: bool = False) -> Any:
    """A live widget in a Jupyter front end; printed text in a terminal or without ipywidgets."""
    if quiet:
        return NullView()
    if shell is not None and type(shell).__name__ != "TerminalInteractiveShell":
        try:
            from .widget import WidgetView

            return WidgetView()
        except ImportError:
            pass
    from .text import TextView

    return TextView()
