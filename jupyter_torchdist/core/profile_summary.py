"""Where a rank's step time went, from its ``torch.profiler`` trace; and which rank the run waits for. Pure.

A trace's complete events ("X": start and duration) are sorted into four kinds by what the profiler names them:
waiting for input (a DataLoader's ``enumerate(DataLoader)...`` span, ``batches()``'s), communication (c10d, gloo and
NCCL collectives), compute (operators on the CPU, kernels and copies on a GPU), and the rest. Time is counted once,
in that order of precedence: a collective that overlaps the backward pass costs nothing exposed, so only
communication nothing else covered is counted as such (the time a rank sat waiting for its peers).

In a synchronous run every rank's step takes as long as the slowest one's: the slow rank is not the one with the
longest steps but the one the others wait for, the rank that spends the least of its time in collectives.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from .contract import ProfileShares

__all__ = ["shares_of", "slowest", "verdict", "trace_name", "KINDS", "KIND_WORDS"]

KINDS: Final = ("input", "compute", "comm", "other")
KIND_WORDS: Final = {"input": "waiting for input", "compute": "computing",
                     "comm": "communicating (all-reduce and other collectives)", "other": "outside operators"}
_INPUT = re.compile(r"^enumerate\(|^jupyter_torchdist\.batches")
_COMM = re.compile(r"c10d::|nccl|gloo:|record_param_comms|allreduce|all_reduce|allgather|all_gather|reduce_scatter|"
                   r"alltoall|all_to_all|^ProcessGroup", re.IGNORECASE)
_COMPUTE_CATS: Final = frozenset({"cpu_op", "kernel", "gpu_memcpy", "gpu_memset"})
_EVEN: Final = 0.1   # comm shares this close: no rank is waited for more than another, the longest steps decide

Interval = tuple[float, float]


def trace_name(rank: int) -> str:
    """A rank's trace, under its run's folder (what TensorBoard's profiler looks for: ``*.pt.trace.json``)."""
    return f"profile/rank-{rank}.pt.trace.json.gz"


def _union(spans: Iterable[Interval]) -> list[Interval]:
    merged: list[list[float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _minus(spans: list[Interval], cover: list[Interval]) -> list[Interval]:
    """``spans`` (a union) less what ``cover`` (a union) covers."""
    out: list[Interval] = []
    j = 0
    for start, end in spans:
        while j < len(cover) and cover[j][1] <= start:
            j += 1
        k, cursor = j, start
        while k < len(cover) and cover[k][0] < end:
            if cover[k][0] > cursor:
                out.append((cursor, cover[k][0]))
            cursor = max(cursor, cover[k][1])
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def _length(spans: Iterable[Interval]) -> float:
    return sum(b - a for a, b in spans)


def _kind(event: Mapping[str, Any]) -> str | None:
    name = str(event.get("name", ""))
    if _INPUT.search(name):
        return "input"
    if _COMM.search(name):
        return "comm"
    if event.get("cat") in _COMPUTE_CATS:
        return "compute"
    return None


def shares_of(events: Sequence[Mapping[str, Any]], steps: int) -> ProfileShares:
    """The shares of a trace's span (its ``traceEvents``) spent on each kind; ``steps``: how many it held."""
    spans: dict[str, list[Interval]] = {k: [] for k in ("input", "compute", "comm")}
    begin, end = float("inf"), float("-inf")
    for event in events:
        if event.get("ph") != "X" or not isinstance(event.get("dur"), (int, float)):
            continue
        start = float(event.get("ts", 0.0))
        stop = start + float(event["dur"])
        begin, end = min(begin, start), max(end, stop)
        kind = _kind(event)
        if kind is not None:
            spans[kind].append((start, stop))
    span = max(0.0, end - begin) if end > begin else 0.0
    counted: list[Interval] = []
    lengths: dict[str, float] = {}
    for kind in ("input", "compute", "comm"):   # precedence: time is counted once, for the first kind covering it
        own = _minus(_union(spans[kind]), counted)
        lengths[kind] = _length(own)
        counted = _union(counted + own)
    share = (lambda x: round(x / span, 4)) if span > 0 else (lambda x: 0.0)
    other = max(0.0, span - sum(lengths.values()))
    return {"span_s": round(span / 1e6, 6), "steps": steps, "input": share(lengths["input"]),
            "compute": share(lengths["compute"]), "comm": share(lengths["comm"]), "other": share(other)}


def _largest(shares: Mapping[str, Any], among: Sequence[str] = KINDS) -> str:
    return max(among, key=lambda k: float(shares.get(k, 0.0)))


def slowest(ranks: Mapping[int, Mapping[str, Any]]) -> int | None:
    """The rank the others wait for: the least time in collectives, unless all wait alike (then the longest steps)."""
    if not ranks:
        return None
    comm = {r: float(s.get("comm", 0.0)) for r, s in ranks.items()}
    if len(ranks) > 1 and max(comm.values()) - min(comm.values()) >= _EVEN:
        return min(comm, key=lambda r: (comm[r], r))
    per_step = {r: float(s.get("step_s") or float(s.get("span_s", 0.0)) / max(1, int(s.get("steps", 1) or 1)))
                for r, s in ranks.items()}
    return max(per_step, key=lambda r: (per_step[r], -r))


def verdict(ranks: Mapping[int, Mapping[str, Any]]) -> str | None:
    """One line: the slowest rank and why, for the view and the report. When even the slowest rank spends most of
    its step in collectives, the collectives themselves are the cost (a large all-reduce, a slow network), whatever
    else holds the others up as well."""
    rank = slowest(ranks)
    if rank is None:
        return None
    own = ranks[rank]
    others = [s for r, s in ranks.items() if r != rank]
    waited = bool(others) and min(_share(s, "comm") for s in others) - _share(own, "comm") >= _EVEN
    rest = _largest(own, ("input", "compute", "other"))
    head = f"rank {rank} is the slowest: "
    if others and _largest(own) == "comm":
        low, high = (f"{f(_share(s, 'comm') for s in ranks.values()):.0%}" for f in (min, max))
        line = (f"{head}{_share(own, 'comm'):.0%} of its step time {KIND_WORDS['comm']}; every rank "
                f"{low if low == high else f'{low}-{high}'} in collectives: the collectives themselves take the time")
        return line + (f"; the others also wait for it: {_share(own, rest):.0%} of its step time {KIND_WORDS[rest]}"
                       if waited else ", no rank holds the others up")
    why = rest if waited else _largest(own)
    line = f"{head}{_share(own, why):.0%} of its step time {KIND_WORDS[why]}"
    if waited:
        mean = sum(_share(s, "comm") for s in others) / len(others)
        line += f"; the others wait for it ({mean:.0%} of their time in collectives)"
    return line


def _share(shares: Mapping[str, Any], kind: str) -> float:
    return float(shares.get(kind, 0.0) or 0.0)
