"""Views draw run snapshots (``schema.RunSnapshot``); they never see messages or sockets.

Every view shares one trimming pipeline (``trim``), one set of colours and formats (``style``) and
the report renderers (``report_text``, ``report_html``; the extension's ``render.ts`` in the browser).
"""
from __future__ import annotations

from typing import Any, Protocol

__all__ = ["RunView", "NullView", "make_view"]


class RunView(Protocol):
    """What the supervisor draws on: a first frame, updates (at most ~10 a second), a last frame.

    ``update`` may return how many seconds the view wants before its next frame (a view with a byte budget paces
    itself so; the supervisor then draws again after that long even if nothing changed), or None for the usual
    pace. ``focus``: ranks the user opened in the view, which a many-rank run's snapshot shows in full."""

    log_tail: int  # log lines per rank the snapshots should carry

    @property
    def focus(self) -> frozenset[int]: ...
    def start(self, snapshot: dict[str, Any]) -> None: ...
    def update(self, snapshot: dict[str, Any]) -> float | None: ...
    def finish(self, snapshot: dict[str, Any]) -> None: ...


class NullView:
    """Draws nothing (``--quiet`` and the plain Python API)."""

    log_tail = 0
    focus: frozenset[int] = frozenset()

    def start(self, snapshot: dict[str, Any]) -> None:
        pass

    def update(self, snapshot: dict[str, Any]) -> None:
        pass

    def finish(self, snapshot: dict[str, Any]) -> None:
        pass


def make_view(shell: Any, quiet: bool = False, background: bool = False) -> RunView:
    """The view for where the code runs.

    In a Jupyter front end (a shell with a kernel): the anywidget live view, drawn by the same code as
    the saved report; where its front end was not built, the report redrawn in place. Printed text in
    a terminal or a shell without a kernel (nobody would draw a widget there); none for a ``background``
    run there (its lines would land in the middle of whatever the terminal shows next).
    """
    if quiet:
        return NullView()
    if getattr(shell, "kernel", None) is not None:
        try:
            from .live import LiveView, live_available
        except ImportError:  # anywidget missing
            live_available = None  # type: ignore[assignment]
        if live_available is not None and live_available():
            from .live import SHOW_AFTER_S

            return LiveView(background=background, show_after=0.0 if background else SHOW_AFTER_S)
        from .display import DisplayView

        return DisplayView()
    if background:
        return NullView()
    from .text import TextView

    return TextView()
