"""Spark DataFrames feed the ranks: ``batches(df, batch_size, transform=...)`` on the ranks, the transform on
Spark executors, the batches streamed to each rank, equal steps on every rank.

Where each part runs:

* kernel: ``handles`` (a DataFrame the cell uses travels as a handle), ``service`` (answers the ranks'
  requests, one epoch at a time) and ``job`` (counts, plans and drives the epoch's Spark job);
* Spark executors: ``producer`` (one piece of a partition per task: read, shuffle, transform, send);
* ranks: ``batches`` (the API) and ``receiver`` (a listener, fragments in, whole batches out);
* everywhere: ``plan`` (pure: who gets which rows), ``codec`` (a fragment on the wire), ``transport``
  (authenticated connections), ``convert`` (columns to arrays and tensors).

Importing this package is light; numpy, pyarrow and pandas are imported where data actually moves.
"""
from __future__ import annotations

__all__ = ["DataError"]


class DataError(RuntimeError):
    """The data for ``batches()`` could not come: the transform raised, a data task was lost, bad arguments."""
