"""The one way curves and queues are thinned: at most ``keep`` items, evenly spread over the whole series, the first
and the last always kept (the last is the newest). The live view, the saved report, a sweep's comparison chart, the
many-rank loss band and a rank's queue of progress points all thin with it, so a curve looks the same wherever it
is drawn."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

__all__ = ["evenly"]

T = TypeVar("T")


def evenly(items: Sequence[T], keep: int) -> list[T]:
    """At most ``keep`` of ``items`` (all of them when they fit), evenly spread, first and last included."""
    n = len(items)
    if n <= keep:
        return list(items)
    if keep <= 1:
        return list(items[-1:]) if keep == 1 else []
    return [items[round(j * (n - 1) / (keep - 1))] for j in range(keep)]
