"""A Spark DataFrame the cell uses travels to the ranks as a handle; the DataFrame itself stays in the kernel.

A DataFrame is a plan on the driver's SparkSession: it cannot be pickled, and the ranks could not run it
anyway. ``reduce_dataframe`` (used by the kernel's pickler) replaces each one with a ``DataFrameHandle``
and remembers the DataFrame under the handle's id, for as long as the kernel lives (kept ranks may hold a
handle across cells). On a rank, the handle is what ``jupyter_torchdist.batches(df, ...)`` takes.
"""
from __future__ import annotations

import secrets
import sys
import threading
from dataclasses import dataclass
from typing import Any

__all__ = ["DataFrameHandle", "reduce_dataframe", "resolve"]


@dataclass(frozen=True)
class DataFrameHandle:
    """A notebook DataFrame, as the ranks see it: pass it to ``jupyter_torchdist.batches``."""

    id: str
    columns: tuple[str, ...]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"on the ranks, a DataFrame is a handle for jupyter_torchdist.batches(df, batch_size, ...): Spark runs in "
            f"the notebook, not on the ranks, so `.{name}` is not available here. Compute it in the notebook "
            "(e.g. n = df.count()) and use the result in the cell.")

    def __repr__(self) -> str:
        return f"DataFrameHandle(columns={list(self.columns)})"


_frames: dict[str, Any] = {}
_ids: dict[int, str] = {}
_lock = threading.Lock()


def _is_dataframe(obj: Any) -> bool:
    if type(obj).__name__ != "DataFrame" or "pyspark.sql" not in sys.modules:
        return False
    from pyspark.sql import DataFrame

    return isinstance(obj, DataFrame)


def register(df: Any) -> DataFrameHandle:
    """The handle for ``df`` (the same one each time for the same DataFrame)."""
    with _lock:
        key = _ids.get(id(df))
        if key is None or _frames.get(key) is not df:
            key = secrets.token_hex(8)
            _frames[key], _ids[id(df)] = df, key
    return DataFrameHandle(key, tuple(df.columns))


def reduce_dataframe(obj: Any) -> tuple[Any, ...] | None:
    """For a pickler's ``reducer_override``: a DataFrame pickles as its handle; anything else: None."""
    if not _is_dataframe(obj):
        return None
    handle = register(obj)
    return DataFrameHandle, (handle.id, handle.columns)


def resolve(key: str) -> Any | None:
    """The DataFrame behind a handle id, or None if this kernel never made that handle."""
    with _lock:
        return _frames.get(key)
