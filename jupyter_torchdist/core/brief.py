"""Saying much briefly, the same way on every side of a run: sizes in words people read, many ranks' texts said once
and counted, and long series thinned evenly."""
from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Sequence
from typing import Final, TypedDict, TypeVar

__all__ = ["human_bytes", "group_texts", "TextGroup", "GROUPS_MAX", "SAMPLE", "evenly"]


# -- sizes, in the words of the kernel's and the ranks' messages ----------------------------------------------------
def human_bytes(n: float) -> str:
    """``512 B``, ``1.5 KB``, ``12.0 MB``, ``2.1 GB``."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


# -- many ranks saying the same thing, said once and counted --------------------------------------------------------
# A thousand echoes of one failure, a thousand ranks waiting at one place: texts are grouped by what they say with
# their numbers ignored (ranks, ports, seconds).
class TextGroup(TypedDict):
    """Ranks that say the same thing, counted, not listed (the snapshot's ``GroupSnapshot``)."""
    summary: str            # what the first of them says: "in all_reduce at cell line 12"
    ranks: int
    sample: list[int]       # the first few of them


GROUPS_MAX: Final = 12        # groups listed
SAMPLE: Final = 5             # ranks named per group
_NUMBERS = re.compile(r"\d+(\.\d+)?")


def group_texts(items: Iterable[tuple[int, str]], limit: int = GROUPS_MAX) -> list[TextGroup]:
    """(rank, text) pairs grouped by what the text says with its numbers ignored (times, ranks, ports), most ranks
    first; each group says its first rank's text and names a few ranks."""
    groups: dict[str, list[tuple[int, str]]] = collections.defaultdict(list)
    for rank, text in items:
        groups[_NUMBERS.sub("#", text)].append((rank, text))
    ordered = sorted(groups.values(), key=lambda g: (-len(g), min(r for r, _ in g)))
    return [{"summary": min(g)[1][:300], "ranks": len(g), "sample": sorted(r for r, _ in g)[:SAMPLE]}
            for g in ordered[:limit]]


# -- the one way curves and queues are thinned -----------------------------------------------------------------------
# At most ``keep`` items, evenly spread over the whole series, the first and the last always kept (the last is the
# newest). The live view, the saved report, a sweep's comparison chart, the many-rank loss band and a rank's queue of
# progress points all thin with it, so a curve looks the same wherever it is drawn.
T = TypeVar("T")


def evenly(items: Sequence[T], keep: int) -> list[T]:
    """At most ``keep`` of ``items`` (all of them when they fit), evenly spread, first and last included."""
    n = len(items)
    if n <= keep:
        return list(items)
    if keep <= 1:
        return list(items[-1:]) if keep == 1 else []
    return [items[round(j * (n - 1) / (keep - 1))] for j in range(keep)]
