"""The run state as the one snapshot every view draws (``views.schema``): pure, no I/O."""
from __future__ import annotations

from typing import Final

from ..errors import root_cause
from ..views.schema import SCHEMA_VERSION, RankSnapshot, RunErrorSnapshot, RunSnapshot
from .lifecycle import RunLifecycle
from .places import place_snapshot
from .rank_state import RankState
from .stall import stall_text
from .usage import data_snapshot, usage_snapshot

__all__ = ["run_snapshot", "LOG_TAIL"]

LOG_TAIL: Final = 200          # lines per rank in a snapshot


def run_snapshot(state: RunLifecycle, log_tail: int = LOG_TAIL) -> RunSnapshot:
    end = state.ended_at if state.ended_at is not None else state.now
    return {
        "version": SCHEMA_VERSION, "title": state.title, "status": state.status, "headline": state.headline,
        "backend": state.backend, "options": dict(state.options), "world_size": state.world_size,
        "elapsed_s": round(max(0.0, end - state.started_at), 3), "value_repr": state.value_repr,
        "error": _error_snapshot(state), "notices": state.notices(),
        "data": data_snapshot(state.data, [r.usage for r in state.ranks]),
        "ranks": [_rank_snapshot(r, end, log_tail) for r in state.ranks],
        "stall": stall_text(state.debug, state.ranks, state.started_at, state.now) if state.ended_at is None else None,
        "run_id": state.run_id, "background": state.background,
    }


def _error_snapshot(state: RunLifecycle) -> RunErrorSnapshot | None:
    if not state.failures:
        return None
    r = root_cause(state.failures)
    return {"rank": r.rank, "host": r.host, "kind": r.kind, "summary": r.summary, "traceback": r.traceback,
            "secondary": [{"rank": f.rank, "host": f.host, "summary": f.summary}
                          for f in sorted(state.failures.values(), key=lambda f: f.rank) if f.rank != r.rank]}


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
