"""A fragment of a batch on the wire, from a data worker to a rank: a fixed header, then the columns.

The header says where the fragment goes (the rank's feed, the step, which part of the batch) before the
body is read, so a rank can leave a fragment for a step it does not want yet in the socket: that is the
back-pressure that keeps at most ``prefetch`` batches waiting in a rank. The body is pickle protocol 5
with every array's bytes out of band, so arrays are neither copied into the pickle nor out of it.
Only authenticated data workers (the run's secret) ever reach a rank's decoder.
"""
from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Header", "HEADER", "encode", "decode", "join", "MAX_BODY"]

HEADER = struct.Struct(">IIHHIQ")   # feed, step, index, of, rows, body bytes
_COUNT = struct.Struct(">I")
_LENGTH = struct.Struct(">Q")
MAX_BODY = 1 << 36                  # 64 GiB: a sanity bound, not a budget


@dataclass(frozen=True)
class Header:
    feed: int     # the rank's feed (one batches() epoch on that rank)
    step: int
    index: int    # this fragment's place in the batch
    of: int       # fragments in the batch
    rows: int
    body: int     # bytes that follow

    def pack(self) -> bytes:
        return HEADER.pack(self.feed, self.step, self.index, self.of, self.rows, self.body)

    @classmethod
    def unpack(cls, data: bytes) -> Header:
        return cls(*HEADER.unpack(data))


def encode(columns: dict[str, Any]) -> list[bytes | memoryview]:
    """The body for ``columns`` (name -> numpy array or list), as chunks to send one after another."""
    buffers: list[pickle.PickleBuffer] = []
    meta = pickle.dumps(columns, protocol=5, buffer_callback=buffers.append)
    views = [b.raw() for b in buffers]
    head = _COUNT.pack(len(meta)) + meta + _COUNT.pack(len(views)) + b"".join(_LENGTH.pack(v.nbytes) for v in views)
    return [head, *views]


def decode(body: bytearray | bytes) -> dict[str, Any]:
    """Columns back from a body; arrays share the body's memory (no copy)."""
    view = memoryview(body)
    (meta_len,) = _COUNT.unpack_from(view, 0)
    at = _COUNT.size
    meta = view[at:at + meta_len]
    at += meta_len
    (count,) = _COUNT.unpack_from(view, at)
    at += _COUNT.size
    lengths = [_LENGTH.unpack_from(view, at + i * _LENGTH.size)[0] for i in range(count)]
    at += count * _LENGTH.size
    buffers = []
    for n in lengths:
        buffers.append(view[at:at + n])
        at += n
    columns = pickle.loads(meta, buffers=buffers)
    if not isinstance(columns, dict):
        raise ValueError("a data fragment must hold a dict of columns")
    return columns


def join(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One batch from its fragments (in order): arrays concatenated along the first axis, lists chained."""
    if len(parts) == 1:
        return parts[0]
    out: dict[str, Any] = {}
    for name in parts[0]:
        values = [p[name] for p in parts]
        if all(isinstance(v, np.ndarray) for v in values):
            out[name] = np.concatenate(values)
        else:
            out[name] = [x for v in values for x in v]
    return out
