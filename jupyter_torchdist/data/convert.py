"""Columns as they travel to the ranks: numeric columns and rectangular arrays become numpy arrays (then torch
tensors on the rank); anything else stays a list of Python values. Runs on data workers and on ranks.

Spark types, as a batch shows them:

* ``boolean``, ``byte``/``short``/``int``/``long``, ``float``/``double`` -> a 1-D tensor of that dtype;
* ``array<numeric>`` of one length (nested arrays too) -> an N-D tensor (batch first), e.g. ``[B, 3*64*64]``;
* strings, binary, dates, timestamps, maps, structs (Spark ML vectors: use ``vector_to_array`` first),
  arrays of unequal lengths, and columns holding nulls -> a list, one Python value per row.

A transform returns a pandas DataFrame (same rule per column; an object column holding equal-shaped arrays
is stacked) or a dict of numpy arrays, torch tensors, pandas Series or lists, one entry per row.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["arrow_columns", "output_columns", "to_torch", "take_rows"]


def _arrow_array(col: Any) -> Any:
    import pyarrow as pa

    t = col.type
    if col.null_count:
        return col.to_pylist()
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        return col.to_numpy(zero_copy_only=False)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        lengths = col.value_lengths().to_numpy(zero_copy_only=False) if len(col) else np.array([0])
        if lengths.min() == lengths.max():
            inner = _arrow_array(col.flatten())
            if isinstance(inner, np.ndarray):
                return inner.reshape(len(col), int(lengths.max()), *inner.shape[1:])
    return col.to_pylist()


def _take_column(col: Any, indices: Any) -> Any:
    """``col.take(indices)``; a list column whose rows all hold the same number of numbers (an image, an
    embedding) is taken as fixed-size lists, a copy of each row's bytes: Arrow's take on variable lists builds an
    index per element, 5 times slower for 3x64x64 floats."""
    import pyarrow as pa

    t = col.type
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and len(col) and not col.null_count \
            and pa.types.is_primitive(t.value_type):
        lengths = col.value_lengths().to_numpy(zero_copy_only=False)
        if lengths.min() == lengths.max() and lengths[0] > 0:
            fixed = pa.FixedSizeListArray.from_arrays(col.flatten(), int(lengths[0]))
            return fixed.take(indices).cast(t)
    return col.take(indices)


def take_rows(table: Any, indices: list[int]) -> Any:
    """The rows of a pyarrow Table at ``indices``, in that order (``table.take``, faster for array columns)."""
    import pyarrow as pa

    chosen = pa.array(indices, type=pa.int64())
    columns = [_take_column(table.column(i).combine_chunks(), chosen) for i in range(table.num_columns)]
    return pa.Table.from_arrays(columns, schema=table.schema)


def arrow_columns(table: Any) -> dict[str, Any]:
    """A pyarrow Table's columns as numpy arrays (numeric, rectangular) or lists."""
    return {name: _arrow_array(table.column(name).combine_chunks()) for name in table.column_names}


def _stack(values: Any) -> Any:
    """An object column: one array when every row holds a numeric array of the same shape, else a list."""
    rows = list(values)
    if rows and all(isinstance(v, (np.ndarray, list, tuple)) for v in rows):
        try:
            stacked = np.stack([np.asarray(v) for v in rows])
        except ValueError:
            return rows
        if stacked.dtype.kind in "biuf":
            return stacked
    return rows


def _column(value: Any) -> Any:
    module = type(value).__module__
    if module.startswith("torch"):
        return value.detach().cpu().numpy()
    if module.startswith("pandas"):
        value = value.to_numpy()
    if isinstance(value, np.ndarray):
        return value if value.dtype.kind in "biuf" else _stack(value)
    if isinstance(value, (list, tuple)):
        return _stack(value)
    raise TypeError(f"a column must be an array, a tensor, a pandas Series or a list, not {type(value).__name__}")


def output_columns(out: Any, rows: int) -> dict[str, Any]:
    """A transform's result as columns; it must keep one entry per input row."""
    if type(out).__module__.startswith("pandas") and hasattr(out, "columns"):
        columns = {str(name): _column(out[name]) for name in out.columns}
    elif isinstance(out, Mapping):
        columns = {str(name): _column(value) for name, value in out.items()}
    else:
        raise TypeError(f"the transform must return a pandas DataFrame or a dict of columns, not {type(out).__name__}")
    for name, value in columns.items():
        if len(value) != rows:
            raise ValueError(f"the transform returned {len(value)} rows in column {name!r} for {rows} input rows: it "
                             "must keep one row per input row (filter rows in Spark, before batches())")
    return columns


def to_torch(columns: dict[str, Any]) -> dict[str, Any]:
    """On the rank: numeric arrays as torch tensors (sharing memory); lists stay lists."""
    import torch

    out: dict[str, Any] = {}
    for name, value in columns.items():
        if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            if value.dtype.kind == "u" and value.dtype.itemsize > 1:
                value = value.astype(np.int64)  # torch has no uint16/32/64 tensors for most operations
            out[name] = torch.from_numpy(value if value.flags.writeable else value.copy())
        else:
            out[name] = value
    return out
