"""The errors of a round that cannot launch anything, naming what each rank asked for.

Every rank takes the same decision from the same round, so every rank reaches these functions together and
exchanges its side in words (an all_gather of small objects, only on this error path): each rank's error names
every rank's shape, dtype, op, scale factors or root, so the cause shows on whichever rank the user looks at.
"""
from __future__ import annotations

from typing import Any

import torch.distributed as dist

from ._errors import MismatchError, StalledError
from ._request import Request

__all__ = ["mismatch_error", "stalled_error"]

_RULE = ("Every rank must pass the same shape (allgather and alltoall: all but the first dimension), dtype, op, "
         "scale factors, root rank and device to the same collective.")


def _sides(group: Any, request: Request | None) -> list[tuple[str, str] | None]:
    mine = None if request is None else (request.label, request.description)
    sides: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(sides, mine, group=group)
    return sides


def _listing(sides: list[tuple[str, str] | None], ranks: list[int], with_label: bool) -> str:
    parts = []
    for rank, side in zip(ranks, sides):
        if side is None:
            parts.append(f"rank {rank}: (inside hvd.join() or not waiting)")
        else:
            label, description = side
            text = f"{label} of {description}" if with_label and description else label if with_label else description
            parts.append(f"rank {rank}: {text}")
    return "; ".join(parts)


def mismatch_error(group: Any, request: Request | None, ranks: list[int]) -> MismatchError:
    """The ranks called the same collective differently: the error every rank raises."""
    sides = _sides(group, request)
    label = next(side[0] for side in sides if side is not None)
    return MismatchError(f"Mismatched {label}: the ranks called it with different arguments "
                         f"({_listing(sides, ranks, with_label=False)}). {_RULE} Nothing was sent; the process group "
                         "is still usable.")


def stalled_error(group: Any, request: Request | None, ranks: list[int]) -> StalledError:
    """Every rank waits on a collective no other rank waits on: the error the waiting ranks raise."""
    sides = _sides(group, request)
    return StalledError("The ranks wait on different collectives, so none of them can run (Horovod would hang "
                        f"here): {_listing(sides, ranks, with_label=True)}. Issue the same collectives on every "
                        "rank; where the order differs between ranks, give them matching name= arguments.")
