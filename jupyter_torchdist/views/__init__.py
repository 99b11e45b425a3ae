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
    """The view for where the cell runs.

    In a Jupyter front end (a shell with a kernel): the anywidget live view (drawn by the same code
    as the saved report) when its front end was built and anywidget imports, else the stock-ipywidgets
    view (a checkout built without Node). Printed text in a terminal, a shell without a kernel
    (nobody would draw a widget), or without ipywidgets.
    """
    if quiet:
        return NullView()
    if getattr(shell, "kernel", None) is not None:
        try:
            from .live import LiveView, live_available

            if live_available():
                return LiveView()
        except ImportError:
            pass
        try:
            from .widget import WidgetView

            return WidgetView()
        except ImportError:
            pass
    from .text import TextView

    return TextView()
