"""Many ranks saying the same thing, said once and counted: a thousand echoes of one failure, a thousand ranks waiting
at one place. Texts are grouped by what they say with their numbers ignored (ranks, ports, seconds)."""
from __future__ import annotations

import collections
import re
from collections.abc import Iterable
from typing import Final, TypedDict

__all__ = ["group_texts", "TextGroup", "GROUPS_MAX", "SAMPLE"]


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
