"""The contract's message about runs the notebook holds a handle to (background runs, sweeps).

Part of the one vocabulary: ``contract.py`` imports it and puts it in ``BackendMessage``, so the kernel's exhaustive
dispatch covers it like any other message. It lives in a module of its own only to keep each module short.

* ``STOP_WANTED`` is said by the kernel's own side (rank -1) into one run's inbox: the user asked to stop that run
  only (``run.stop()``, the Stop control of a background run's view, a sweep's ``stop()``, the kernel's shutdown).
  A foreground run is stopped by the kernel's interrupt instead; its supervisor takes this message all the same.
* ``FOCUS_WANTED`` is said by the kernel's own side into one run's inbox: the user opened these ranks in a many-rank
  run's view, whose snapshot then carries their full rows (their logs, stack, curve) besides the featured ranks'.
"""
from __future__ import annotations

from typing import Final, Literal, TypedDict

__all__ = ["STOP_WANTED", "StopWantedMsg", "FOCUS_WANTED", "FocusWantedMsg"]

STOP_WANTED: Final = "stop_wanted"  # the kernel's own side (rank -1): stop this run, and nothing else
FOCUS_WANTED: Final = "focus_wanted"  # the kernel's own side (rank -1): the view opened these ranks


class _StopWanted(TypedDict):
    t: Literal["stop_wanted"]


class StopWantedMsg(_StopWanted, total=False):
    by: str   # who asked, in words ("run.stop()", "the view's Stop", "the kernel's shutdown")


class FocusWantedMsg(TypedDict):
    t: Literal["focus_wanted"]
    ranks: list[int]   # the ranks the user opened (none: closed), a few at most
