"""The run state as the one snapshot every view draws (``views.schema``): pure, no I/O."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from ...core.errors import root_cause
from ...core.profile_summary import trace_name, verdict
from ...views.schema import (SCHEMA_VERSION, ProfileRankSnapshot, ProfileSnapshot, RankSnapshot, RunErrorSnapshot,
    RunSnapshot)
from .lifecycle import RunLifecycle
from .places import place_snapshot
from .rank import RankState
from .stall import stall_text
from ...core.brief import group_texts
from .many_ranks import LossBand, featured, is_many, rank_table, summary_snapshot
from .resource_use import data_snapshot, usage_snapshot

__all__ = ["run_snapshot", "LOG_TAIL"]

LOG_TAIL: Final = 200          # lines per rank in a snapshot
SECONDARY_MANY: Final = 16     # other ranks' failures listed one by one in a many-rank run (the rest are grouped)


def run_snapshot(state: RunLifecycle, log_tail: int = LOG_TAIL, focus: Iterable[int] = (),
                 band: LossBand | None = None) -> RunSnapshot:
    """The run as the views draw it. Above ``MANY_RANKS`` ranks: a summary, a compact table of every rank and full
    rows only for the featured ranks (failed, outliers, ``focus``: those the view asked for); ``band`` is the
    run's loss band, sampled by the caller."""
    end = state.ended_at if state.ended_at is not None else state.now
    many = is_many(state.world_size)
    summary = summary_snapshot(state.ranks, band or LossBand(), end) if many else None
    shown = featured(state.ranks, summary, focus) if summary is not None else state.ranks
    profile = profile_snapshot(state)
    return {
        "version": SCHEMA_VERSION, "title": state.title, "status": state.status, "headline": state.headline,
        "backend": state.backend, "options": dict(state.options), "world_size": state.world_size,
        "elapsed_s": round(max(0.0, end - state.started_at), 3), "value_repr": state.value_repr,
        "error": _error_snapshot(state, many),
        "notices": state.notices() + ([f"profile: {profile['verdict']}"] if profile and profile["verdict"] else []),
        "data": data_snapshot(state.data, [r.usage for r in state.ranks]),
        "ranks": [_rank_snapshot(r, end, log_tail) for r in shown],
        "stall": stall_text(state.debug, state.ranks, state.started_at, state.now) if state.ended_at is None else None,
        "run_id": state.run_id, "id": state.durable_id, "background": state.background,
        "summary": summary, "table": rank_table(state.ranks) if many else None, "profile": profile,
    }


def profile_snapshot(state: RunLifecycle) -> ProfileSnapshot | None:
    """The ranks' --profile windows and the verdict (None until a rank sent one)."""
    sent = [r for r in state.ranks if r.profile is not None]
    if not sent:
        return None
    rows: list[ProfileRankSnapshot] = []
    for r in sent:
        p = r.profile or {}
        shares = p.get("shares") or {}
        steps = int(shares.get("steps") or 0)
        rows.append({"rank": r.rank, "first": p.get("first"), "last": p.get("last"), "steps": steps,
                     "step_s": round(float(shares.get("span_s") or 0.0) / steps, 6) if steps else None,
                     "input": float(shares.get("input") or 0.0), "compute": float(shares.get("compute") or 0.0),
                     "comm": float(shares.get("comm") or 0.0), "other": float(shares.get("other") or 0.0),
                     "trace": f"{state.folder}/{trace_name(r.rank)}" if p.get("trace") and state.folder else None,
                     "note": p.get("note")})
    counted = {row["rank"]: dict(row) for row in rows if row["steps"]}
    return {"folder": state.folder, "ranks": rows, "verdict": verdict(counted)}


def _error_snapshot(state: RunLifecycle, many: bool) -> RunErrorSnapshot | None:
    """The root cause, the other ranks' failures (the first few one by one in a many-rank run) and all of them
    grouped by what they say: a thousand echoes of one failure are one line, counted."""
    if not state.failures:
        return None
    r = root_cause(state.failures)
    others = [f for f in sorted(state.failures.values(), key=lambda f: f.rank) if f.rank != r.rank]
    return {"rank": r.rank, "host": r.host, "kind": r.kind, "summary": r.summary, "traceback": r.traceback,
            "secondary": [{"rank": f.rank, "host": f.host, "summary": f.summary}
                          for f in (others[:SECONDARY_MANY] if many else others)],
            "echoes": group_texts((f.rank, f.summary) for f in others)}


def _rank_snapshot(r: RankState, end: float, log_tail: int) -> RankSnapshot:
    stop = r.ended_at if r.ended_at is not None else end
    tail = list(r.logs)[-log_tail:] if log_tail else []
    return {
        "rank": r.rank, "host": r.where, "state": r.state, "step": r.step, "total": r.total,
        "rate": None if r.rate is None else round(r.rate, 3), "metrics": dict(r.metrics),
        "last_line": r.last_line,
        "elapsed_s": None if r.started_at is None else round(max(0.0, stop - r.started_at), 3),
        "exit_code": r.exit_code, "exit_signal": r.exit_signal,
        "error": r.failure.summary if r.failure else None,
        "log_lines": r.log_lines, "log_dropped": r.log_dropped, "log_tail": [[s, t] for s, t in tail],
        "loss_history": [[x, round(y, 6)] for x, y in r.history],
        "usage": usage_snapshot(r.usage) if r.usage.rss is not None or r.usage.data_s is not None else None,
        "place": place_snapshot(r.debug, r.state, end), "paused": r.debug.paused,
    }
