"""Where a run's time goes, folded from messages (pure): each rank's CPU, memory, GPU and input wait, and the
data job's workers and rows per second. ``RunState`` holds these; the snapshot draws them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from ...core.contract import DataStatusMsg, UsageMsg
from ...views.schema import DataSnapshot, UsageSnapshot

__all__ = ["RankUsage", "DataStats", "fold_usage", "fold_data_status", "data_over", "input_notice", "INPUT_BOUND",
           "usage_snapshot", "data_snapshot"]

INPUT_BOUND: Final = 0.30     # ranks waiting for data more than this share of the time are input-bound
INPUT_MIN_S: Final = 2.0      # ... judged only after this long reading data (the first batch always waits)
RATE_WINDOW_S: Final = 0.5    # rows/s is measured over at least this long


def _num(value: float | None) -> float | None:
    """A finite number, or None (the channel checked only the fields it knows; a test may send anything)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _int(value: int | None) -> int | None:
    number = _num(value)
    return None if number is None else int(number)


@dataclass
class RankUsage:
    cpu_pct: float | None = None
    rss: int | None = None
    gpu_util: float | None = None
    gpu_mem: int | None = None
    wait_s: float | None = None      # this cell: time waiting in batches()
    data_s: float | None = None      # this cell: time since the first batch was asked for
    rows: int = 0                    # rows handed to the training loop this cell
    rows_mark: tuple[float, int] | None = None
    rows_per_s: float | None = None

    @property
    def input_wait(self) -> float | None:
        if self.wait_s is None or not self.data_s:
            return None
        return max(0.0, min(1.0, self.wait_s / self.data_s))


def fold_usage(u: RankUsage, msg: UsageMsg, at: float) -> None:
    """One reading from the rank; absent fields keep their last value."""
    if "cpu_pct" in msg:
        u.cpu_pct = _num(msg["cpu_pct"])
    if "gpu_util" in msg:
        u.gpu_util = _num(msg["gpu_util"])
    if "rss" in msg:
        u.rss = _int(msg["rss"])
    if "gpu_mem" in msg:
        u.gpu_mem = _int(msg["gpu_mem"])
    wait, span, rows = _num(msg.get("wait_s")), _num(msg.get("data_s")), _int(msg.get("rows"))
    if wait is None or span is None or rows is None:
        return
    u.wait_s, u.data_s, u.rows = wait, span, rows
    when = _num(msg.get("at")) or at
    if u.rows_mark is None or u.rows < u.rows_mark[1]:
        u.rows_mark = (when, u.rows)
    elif when - u.rows_mark[0] >= RATE_WINDOW_S:
        inst = (u.rows - u.rows_mark[1]) / (when - u.rows_mark[0])
        u.rows_per_s = inst if u.rows_per_s is None else 0.5 * u.rows_per_s + 0.5 * inst
        u.rows_mark = (when, u.rows)


@dataclass
class DataStats:
    workers: int = 0       # data workers of the latest epoch
    active: int = 0        # ... still making batches
    running: int = 0       # ... with a task running
    rows_sent: int = 0     # rows the latest epoch's workers sent


def data_over(d: DataStats) -> None:
    """The run is over and its data jobs with it (their last status may not have been read)."""
    d.active = d.running = 0


def fold_data_status(d: DataStats, msg: DataStatusMsg) -> None:
    """The data workers' latest numbers (a field that is not a number keeps its last value)."""
    d.workers = _or(_int(msg.get("workers")), d.workers)
    d.active = _or(_int(msg.get("active")), d.active)
    d.running = _or(_int(msg.get("running")), d.running)
    d.rows_sent = _or(_int(msg.get("rows")), d.rows_sent)


def _or(value: int | None, last: int) -> int:
    return last if value is None else value


def input_notice(usages: list[RankUsage], workers: int) -> str | None:
    """Plain words when the ranks wait for data more than INPUT_BOUND of the time, and what to do."""
    shares = [u.input_wait for u in usages if u.input_wait is not None and (u.data_s or 0) >= INPUT_MIN_S]
    if not shares or sum(shares) / len(shares) <= INPUT_BOUND:
        return None
    share = sum(shares) / len(shares)
    more = f"more data workers (--data-workers {max(2, 2 * workers)})" if workers else "more data workers"
    return (f"input-bound: the ranks wait for data {share:.0%} of the time. The data workers cannot keep up: "
            f"give them {more} or more CPU executors, or make the transform lighter.")


def usage_snapshot(u: RankUsage) -> UsageSnapshot:
    wait = u.input_wait
    return {"cpu_pct": u.cpu_pct, "rss": u.rss, "gpu_util": u.gpu_util, "gpu_mem": u.gpu_mem,
            "input_wait": None if wait is None else round(wait, 4), "rows": u.rows,
            "rows_per_s": None if u.rows_per_s is None else round(u.rows_per_s, 1)}


def data_snapshot(d: DataStats, usages: list[RankUsage]) -> DataSnapshot | None:
    fed = [u for u in usages if u.data_s is not None]
    if not fed and not d.workers and not d.rows_sent:
        return None
    rates = [u.rows_per_s for u in fed if u.rows_per_s is not None]
    spans = [u.data_s for u in fed if u.data_s]
    return {"workers": d.workers, "active": d.active, "running": d.running, "rows": sum(u.rows for u in fed),
            "rows_per_s": round(sum(rates), 1) if rates else None,
            "seconds": round(max(spans), 2) if spans else None}
