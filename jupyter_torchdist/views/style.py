"""What every Python view shares: the colour of each state, its label, and how numbers read.

The colours follow ``labextension/style/base.css``: each state maps to a role (ok, bad, warn, info,
idle) and each role to the CSS variable's fallback colour (a test holds the two together).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Final

from .schema import LOSS_KEYS

__all__ = ["ECHOES_FROM", "tally_counts", "ROLE_COLOURS", "STATE_ROLES", "colour", "status_label", "KIND_LABELS",
           "DASH", "clip", "clip_tail", "finite", "duration", "fmt_metric", "rate", "progress", "exit_text",
           "ordered_metrics", "metrics_text", "where", "tally", "state_words"]

ROLE_COLOURS: Final = {"ok": "#388e3c", "bad": "#d32f2f", "warn": "#f57c00", "info": "#1976d2", "idle": "#9e9e9e"}
STATE_ROLES: Final = {
    # run statuses
    "succeeded": "ok", "failed": "bad", "timeout": "warn", "interrupted": "warn",
    "running": "info", "starting": "info", "stopping": "info", "queued": "idle",
    # rank states (failed, running, starting as above)
    "done": "ok", "stopped": "warn", "pending": "idle",
    # sweep members (queued, running, done, failed, stopped as above): "stopped_early" by the sweep's early-stopping
    # rule, an expected outcome rather than a fault, so it reads muted like idle, never like failed or stopped
    "stopped_early": "idle",
}
_STATUS_LABELS: Final = {"timeout": "timed out"}
KIND_LABELS: Final = {
    "exception": "raised an exception", "exit": "process exited",
    "lost": "lost by the launcher", "launch": "failed to launch",
}
DASH: Final = "\u2014"
_STATE_ORDER: Final = ("running", "starting", "pending", "queued", "done", "stopped_early", "stopped", "failed")


def colour(state: str) -> str:
    """The colour of a run status or a rank state (grey for anything unknown)."""
    return ROLE_COLOURS[STATE_ROLES.get(state, "idle")]


def status_label(status: str) -> str:
    return _STATUS_LABELS.get(status, status or "unknown")


def clip(text: Any, limit: int) -> str:
    """``text`` as a string of at most about ``limit`` characters, the head kept."""
    s = "" if text is None else str(text)
    return s if len(s) <= limit else f"{s[:limit]}\u2026 ({len(s) - limit:,} more characters)"


def clip_tail(text: Any, limit: int) -> str:
    """``text`` with at most ``limit`` characters, the end kept (tracebacks end with the error)."""
    s = "" if text is None else str(text)
    return s if len(s) <= limit else f"\u2026 ({len(s) - limit:,} characters cut)\n{s[-limit:]}"


def finite(value: Any) -> float | int | None:
    """A finite number, or None for anything else (strings, NaN, booleans)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def duration(seconds: Any) -> str:
    """``0.42 s``, ``12.3 s``, ``2m 05s``, ``1h 02m``."""
    s = finite(seconds)
    if s is None or s < 0:
        return DASH
    if s < 10:
        return f"{s:.2f} s"
    if s < 60:
        return f"{s:.1f} s"
    whole = round(s)
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


def fmt_metric(value: Any) -> str:
    """4 significant digits, an exponent when tiny or huge, whole numbers as they are."""
    n = finite(value)
    if n is None:
        return clip(value, 40) if value is not None else DASH
    if isinstance(n, int) or (float(n).is_integer() and abs(n) < 1e9):
        return str(int(n))
    a = abs(n)
    return f"{n:.2e}" if a >= 1e5 or a < 1e-3 else f"{n:.4g}"


def rate(value: Any) -> str:
    n = finite(value)
    if n is None:
        return DASH
    return f"{n:.0f} it/s" if n >= 100 else f"{n:.1f} it/s" if n >= 10 else f"{n:.2f} it/s"


def progress(r: Mapping[str, Any]) -> tuple[str, float | None]:
    """("12/100", 0.12), ("step 12", None) without a total, or (DASH, None)."""
    step, total = finite(r.get("step")), finite(r.get("total"))
    if step is None:
        return DASH, None
    if total:
        return f"{int(step)}/{int(total)}", max(0.0, min(1.0, step / total))
    return f"step {int(step)}", None


def exit_text(r: Mapping[str, Any]) -> str:
    if r.get("exit_signal"):
        return str(r["exit_signal"])
    code = finite(r.get("exit_code"))
    return DASH if code is None else str(int(code))


def ordered_metrics(metrics: Any) -> list[tuple[str, Any]]:
    """Metric items with the loss first, then the rest in their given order."""
    if not isinstance(metrics, Mapping):
        return []

    def weight(key: str) -> int:
        return 0 if key in LOSS_KEYS else 1 if key.endswith("loss") else 2

    return sorted(metrics.items(), key=lambda kv: weight(str(kv[0])))


def metrics_text(r: Mapping[str, Any], limit: int = 60) -> str:
    metrics = ordered_metrics(r.get("metrics"))
    return clip(" ".join(f"{k}={fmt_metric(v)}" for k, v in metrics), limit) if metrics else ""


def where(e: Mapping[str, Any]) -> str:
    """``rank 3 on host-a``."""
    rank, host = e.get("rank"), e.get("host")
    return f"rank {'?' if rank is None else rank}" + (f" on {host}" if host else "")


ECHOES_FROM: Final = 16  # this many other ranks' failures or more are shown grouped by what they say


def tally(ranks: Iterable[Mapping[str, Any]]) -> str:
    """``2 running, 1 done, 1 failed``."""
    counts: dict[str, int] = {}
    for r in ranks:
        state = str(r.get("state") or "pending")
        counts[state] = counts.get(state, 0) + 1
    return tally_counts(counts)


def tally_counts(counts: Mapping[str, int]) -> str:
    """``1,020 running, 3 done, 2 stopped early, 1 failed``: counts by state, the states in their usual order."""
    keys = [k for k in _STATE_ORDER if counts.get(k)] + [k for k in counts if k not in _STATE_ORDER and counts[k]]
    return ", ".join(f"{counts[k]:,} {state_words(k)}" for k in keys)


def state_words(state: str) -> str:
    """A state as the views say it: ``stopped_early`` reads ``stopped early``."""
    return state.replace("_", " ")
