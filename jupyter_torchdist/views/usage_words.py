"""Where the time goes, in words every Python view uses (``labextension/src/usage.ts`` says the same).

Per rank: CPU (% of one core), memory, the GPU (utilisation · memory) under ``--gpu``, and the share of
its time spent waiting for ``batches()`` data. For the run: the data job's workers and rows per second.
Columns appear only when some rank has them (no GPU column on a CPU run, no input wait without data).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..core.brief import human_bytes
from .schema import DataSnapshot
from .style import DASH, finite

__all__ = ["usage_columns", "usage_cells", "data_line", "INPUT_BOUND", "input_bound"]

INPUT_BOUND: Final = 0.30  # the same threshold as the kernel's notice (kernel/state/resource_use.py)


def _usage(r: Mapping[str, Any]) -> Mapping[str, Any]:
    u = r.get("usage")
    return u if isinstance(u, Mapping) else {}


def usage_columns(ranks: Sequence[Mapping[str, Any]]) -> list[str]:
    """The usage columns this run has: CPU and Mem, GPU, Input wait."""
    usages = [_usage(r) for r in ranks]
    cols = ["CPU", "Mem"] if any(u.get("rss") is not None or u.get("cpu_pct") is not None for u in usages) else []
    if any(u.get("gpu_mem") is not None or u.get("gpu_util") is not None for u in usages):
        cols.append("GPU")
    if any(u.get("input_wait") is not None for u in usages):
        cols.append("Input wait")
    return cols


def input_bound(r: Mapping[str, Any]) -> bool:
    wait = finite(_usage(r).get("input_wait"))
    return wait is not None and wait > INPUT_BOUND


def _pct(value: Any) -> str:
    n = finite(value)
    return DASH if n is None else f"{n:.0f}%"


def _bytes(value: Any) -> str:
    n = finite(value)
    return DASH if n is None else human_bytes(n)


def usage_cells(r: Mapping[str, Any], columns: Sequence[str]) -> list[str]:
    """One rank's text for each of ``columns``."""
    u = _usage(r)
    text = {"CPU": _pct(u.get("cpu_pct")), "Mem": _bytes(u.get("rss")),
            "GPU": f"{_pct(u.get('gpu_util'))} \u00b7 {_bytes(u.get('gpu_mem'))}",
            "Input wait": DASH if finite(u.get("input_wait")) is None else _pct(100 * u["input_wait"])}
    return [text[c] for c in columns]


def data_line(data: DataSnapshot | None) -> str | None:
    """While it runs ``data: 2 workers (1 running) · 1,234 rows/s · 12,000 rows``; at the end
    ``data: 2 workers · 12,000 rows in 9.7 s (1,237 rows/s)``. None without a data job."""
    if not data:
        return None
    parts = [f"data: {data['workers']} worker{'s' if data['workers'] != 1 else ''}"
             + (f" ({data['running']} running)" if data["active"] else "")]
    if data["active"]:
        parts += [f"{data['rows_per_s']:,.0f} rows/s"] if data["rows_per_s"] is not None else []
        parts.append(f"{data['rows']:,} rows")
    elif data["seconds"]:
        parts.append(f"{data['rows']:,} rows in {data['seconds']:.1f} s ({data['rows'] / data['seconds']:,.0f} rows/s)")
    else:
        parts.append(f"{data['rows']:,} rows")
    return " \u00b7 ".join(parts)
