"""Runs on Spark executors, in the data job's tasks: one piece of one partition per task.

``producer(spec)`` is the function ``mapInArrow`` calls with the partition's Arrow batches. It reads the
piece's rows (stopping at its end), shuffles them within blocks, cuts them into the plan's fragments, runs
the user's transform on each fragment (on a thread of lower CPU priority, one fragment ahead of the sending),
and streams each to its rank (``transport``, ``codec``). The piece
to run comes in a local property of the job (``PIECE_PROPERTY``): one mapped DataFrame serves a whole
epoch. It yields one status row; a transform's exception is a status, not a task failure, so Spark does
not retry what would fail again, and the kernel can say which transform failed on which rows.
"""
from __future__ import annotations

import itertools
import json
import linecache
import os
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import cloudpickle

from ..core.contract import TLSPin
from ..rank.allocator import tune_allocator
from .codec import Header, encode
from .convert import arrow_columns, output_columns, take_rows
from .plan import BLOCK_ROWS, block_order
from .transport import connect_to_rank

__all__ = ["ProducerSpec", "producer", "PIECE_PROPERTY", "STATUS_SCHEMA"]

PIECE_PROPERTY = "jupyter_torchdist.data.piece"
TRANSFORM_NICE = 10  # the transform's thread runs at this niceness: training first, then data
AHEAD_FRAGMENTS = 2  # a piece started ahead: its first transforms (done before its turn) take spare CPU only
_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STATUS_SCHEMA = "status string"


@dataclass(frozen=True)
class ProducerSpec:
    """What every task of one epoch's data job needs (the piece itself comes with each job)."""

    secret: bytes
    addresses: tuple[tuple[str, int], ...]       # each rank's data listener
    pins: tuple[TLSPin | None, ...]              # each rank's certificate, with channel TLS
    feeds: tuple[int, ...]                       # each rank's feed for this epoch
    transform: bytes | None                      # cloudpickle of the user's function
    transform_name: str
    shuffle: bool
    seed: int
    epoch: int
    sources: tuple[tuple[str, str], ...] = ()    # (filename, text) so the transform's traceback shows its lines


def _register(sources: tuple[tuple[str, str], ...]) -> None:
    for filename, text in sources:
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)


def _blocks(batches: Iterator[Any], piece: dict[str, Any], spec: ProducerSpec) -> Iterator[Any]:
    """The piece's rows as Arrow tables of up to BLOCK_ROWS rows, each shuffled within itself."""
    import pyarrow as pa

    lo, hi = piece["lo"], piece["hi"]
    order = block_order(hi - lo, spec.shuffle, spec.seed, spec.epoch, (piece["partition"], lo))
    at, done, held, pending = 0, 0, 0, []  # partition rows seen, piece rows yielded, rows waiting
    for batch in batches:
        start, end = max(lo, at), min(hi, at + batch.num_rows)
        if end > start:
            pending.append(batch.slice(start - at, end - start))
            held += end - start
        at += batch.num_rows
        while held >= BLOCK_ROWS or (held and at >= hi):
            n = min(BLOCK_ROWS, held)
            table = pa.Table.from_batches(pending)
            yield take_rows(table.slice(0, n), [i - done for i in order[done:done + n]])
            rest = table.slice(n)
            done, held, pending = done + n, rest.num_rows, rest.to_batches()
        if at >= hi:
            return  # the rest of the partition is another piece's
    raise LookupError(f"partition {piece['partition']} has {at} rows, but the plan counted at least {hi}: the "
                      "DataFrame changed between counting and reading (a non-deterministic source?). "
                      "Persist it first (df = df.cache() or df.localCheckpoint()).")


class _Senders:
    """One authenticated connection per rank this task sends to, opened on first use."""

    def __init__(self, spec: ProducerSpec, piece: int) -> None:
        self.spec, self.piece = spec, piece
        self.conns: dict[int, Any] = {}

    def send(self, rank: int, header: Header, chunks: list[bytes | memoryview]) -> None:
        conn = self.conns.get(rank)
        if conn is None:
            conn = self.conns[rank] = connect_to_rank(self.spec.addresses[rank], self.spec.secret, self.piece,
                                                      self.spec.pins[rank], rank)
        conn.sendall(header.pack() + bytes(chunks[0]))  # the header with the small head: one segment
        for chunk in chunks[1:]:
            conn.sendall(chunk)

    def close(self) -> None:
        for conn in self.conns.values():
            try:
                conn.close()
            except OSError:
                pass


def _columns(transform: Callable[[Any], Any] | None, table: Any) -> dict[str, Any]:
    if transform is None:
        return arrow_columns(table)
    return output_columns(transform(table.to_pandas()), table.num_rows)


def _lower_priority() -> None:
    """The transform's thread yields to the ranks' training loops on a shared host (only this thread, which
    ends with the task: the reused Python worker keeps its own priority)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), TRANSFORM_NICE)
    except (AttributeError, OSError):
        pass


def _idle_priority() -> None:
    """A thread that only takes CPU nothing else wants (Linux's SCHED_IDLE; elsewhere the lowest niceness).
    Work done ahead of need must not slow the batches the ranks wait for: a thread cannot be raised again
    without privileges, so such work gets a thread of its own."""
    tid = threading.get_native_id()
    try:
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        try:
            os.setpriority(os.PRIO_PROCESS, tid, 19)
        except (AttributeError, OSError):
            pass


def _tables(piece: dict[str, Any], blocks: Iterator[Any]) -> Iterator[tuple[list[int], Any]]:
    """Each fragment of the piece with its rows, in order."""
    import pyarrow as pa

    pending, held = [], 0
    skip = int(piece.get("skip") or 0)  # delivered before a restart: read past, never transformed
    while skip:
        block = next(blocks)
        if block.num_rows > skip:
            pending, held = [block.slice(skip)], block.num_rows - skip
            break
        skip -= block.num_rows
    for fragment in piece["fragments"]:
        rows = fragment[4]
        while held < rows:
            block = next(blocks)
            pending.append(block)
            held += block.num_rows
        table = pa.concat_tables(pending)
        rest = table.slice(rows)
        pending, held = [rest], rest.num_rows
        yield fragment, table.slice(0, rows)


def _prepare(transform: Callable[[Any], Any] | None, table: Any) -> tuple[list[Any], float]:
    start = time.monotonic()
    chunks = encode(_columns(transform, table))
    return chunks, time.monotonic() - start


def _fragments(spec: ProducerSpec, piece: dict[str, Any], batches: Iterator[Any],
               transform: Callable[[Any], Any] | None, stats: dict[str, float]) -> None:
    """Send every fragment of the piece, in order; the next one is transformed while this one is sent.

    A piece started ahead (pipelined behind the lane's current piece) transforms its first ``AHEAD_FRAGMENTS``
    on an idle-priority thread: at the start of an epoch every lane's first two tasks start at once, and the
    second one's transforms at normal priority halved the CPU of the batches the ranks wait for (the first
    steps stalled 50 to 120 ms each); the rest go to the usual transform thread once the piece is sending."""
    from concurrent.futures import ThreadPoolExecutor

    senders = _Senders(spec, piece["id"])
    pool = ThreadPoolExecutor(1, thread_name_prefix="jtd-transform", initializer=_lower_priority)
    early = ThreadPoolExecutor(1, thread_name_prefix="jtd-ahead", initializer=_idle_priority) \
        if piece.get("ahead") else pool
    try:
        tables = enumerate(_tables(piece, _blocks(batches, piece, spec)))

        def next_one() -> list[tuple[Any, Any]]:
            return [(f, (early if i < AHEAD_FRAGMENTS else pool).submit(_prepare, transform, t))
                    for i, (f, t) in itertools.islice(tables, 1)]

        ahead = next_one()
        while ahead:
            (rank, step, index, of, rows), future = ahead.pop(0)
            ahead += next_one()
            chunks, seconds = future.result()
            stats["transform_s"] += seconds
            body = sum(len(c) if isinstance(c, bytes) else c.nbytes for c in chunks)
            senders.send(rank, Header(spec.feeds[rank], step, index, of, rows, body), chunks)
            stats["rows"] += rows
    finally:
        for executor in {pool, early}:
            executor.shutdown(wait=True, cancel_futures=True)
        senders.close()


def _user_traceback(exc: BaseException) -> str:
    """The traceback from inside the transform down, without our frames."""
    frames = list(traceback.walk_tb(exc.__traceback__))
    inside = [i for i, (f, _) in enumerate(frames) if f.f_code.co_name == "_columns"]
    tb = exc.__traceback__
    for _ in range(inside[0] + 1 if inside else 0):
        tb = tb.tb_next if tb is not None else None
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_PKG_DIR):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))[-20_000:]


def _failure(spec: ProducerSpec, piece: dict[str, Any], exc: BaseException, in_transform: bool) -> dict[str, Any]:
    where = f"partition {piece['partition']} (rows {piece['lo']}-{piece['hi'] - 1})"
    what = f"the transform {spec.transform_name}" if in_transform else "reading the data"
    return {"error": f"{what} failed on {where}: {type(exc).__name__}: {str(exc)[:500]}",
            "traceback": _user_traceback(exc) if in_transform else "".join(traceback.format_exception(exc))[-20_000:],
            "user": in_transform or isinstance(exc, LookupError)}


def run_piece(spec: ProducerSpec, piece: dict[str, Any], batches: Iterator[Any]) -> dict[str, Any]:
    """Stream one piece to the ranks; its status: rows sent and transform time, or what failed."""
    tune_allocator()  # transforms' large temporaries reuse the heap, as in the ranks (rank/allocator.py)
    _register(spec.sources)
    began = time.monotonic()
    stats = {"rows": 0.0, "transform_s": 0.0}
    transform = cloudpickle.loads(spec.transform) if spec.transform else None
    try:
        _fragments(spec, piece, batches, transform, stats)
        for _ in batches:
            pass  # read to the end: a Python worker whose input was left unread is not reused (and the next
            # task would pay for a fresh one, importing pandas again: about half a second)
    except (OSError, EOFError, ConnectionError):
        raise  # a rank went away (or the cell ended): Spark's task failure says so, the kernel decides
    except Exception as exc:
        from_transform = transform is not None and any(
            f.f_code.co_name == "_columns" for f, _ in traceback.walk_tb(exc.__traceback__))
        return _failure(spec, piece, exc, from_transform)
    return {"piece": piece["id"], **stats, "task_s": round(time.monotonic() - began, 4)}


def producer(spec: ProducerSpec, given: dict[str, Any] | None = None) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The function for ``df.mapInArrow(producer(spec), STATUS_SCHEMA)``: the piece comes in the job's local
    property (one mapped DataFrame serves the epoch), or as ``given`` (one mapped DataFrame per piece, where a
    session has no local properties: Spark Connect). The tasks of other partitions yield no row."""

    def produce(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if given is not None and ctx is not None and ctx.partitionId() != given["partition"]:
            return  # not this piece's partition (its rows were filtered out before they reached us)
        piece = given if given is not None else \
            json.loads(ctx.getLocalProperty(PIECE_PROPERTY) or "{}") if ctx is not None else {}
        if not piece or ctx is None or ctx.partitionId() != piece.get("partition"):
            status = {"error": "a data task ran without its piece (internal error)", "traceback": "", "user": False}
        else:
            status = run_piece(spec, piece, batches)
        yield pa.RecordBatch.from_pydict({"status": [json.dumps(status)]})

    return produce
