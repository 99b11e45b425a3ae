"""Runs on each rank: ``batches(df, batch_size, ...)``, an epoch of a notebook DataFrame as training batches.

Each rank asks the kernel for the epoch (DATA_OPEN: the same arguments on every rank, like a
``DistributedSampler``); the kernel plans it once every rank has asked, tells each rank how many steps it
gets (DATA_PLAN), and starts the data job whose tasks stream fragments to the ranks' listeners. Iterating
takes whole batches in step order, as torch tensors. Stopping early (``break``) tells the kernel, which
stops the job once every rank has stopped; the next ``batches()`` call starts afresh.
"""
from __future__ import annotations

import json
import linecache
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core import contract as C
from ..core.travel import dumps
from . import DataError
from .frame_handles import DataFrameHandle

if TYPE_CHECKING:
    from ..rank.runtime import RankRuntime

__all__ = ["batches", "Batches", "RankData", "cell_numbers"]


@dataclass(frozen=True)
class _Args:
    batch_size: int
    columns: tuple[str, ...] | None
    shuffle: bool
    seed: int
    epoch: int
    drop_last: bool
    prefetch: int


def _whole(name: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"batches(): {name} must be a whole number >= {least}, got {value!r}")
    return value


def _check(df: Any, batch_size: Any, transform: Any, columns: Any, shuffle: Any, seed: Any, epoch: Any,
           drop_last: Any, prefetch: Any) -> _Args:
    if not isinstance(df, DataFrameHandle):
        where = ("a Spark DataFrame runs its data job from the notebook: call batches() in a %%distribute cell "
                 "(or jt.run) that uses the DataFrame" if type(df).__name__ == "DataFrame" else
                 f"batches() takes a Spark DataFrame from the notebook, not {type(df).__name__}")
        raise TypeError(where)
    if transform is not None and not callable(transform):
        raise TypeError(f"batches(): transform must be a function of a pandas DataFrame, "
                        f"not {type(transform).__name__}")
    if columns is not None:
        if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
            raise TypeError("batches(): columns must be a list of column names")
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise ValueError(f"batches(): no column {missing[0]!r} in the DataFrame (it has {list(df.columns)})")
    return _Args(_whole("batch_size", batch_size, 1), None if columns is None else tuple(columns), bool(shuffle),
                 _whole("seed", seed, 0), _whole("epoch", epoch, 0), bool(drop_last), _whole("prefetch", prefetch, 1))


def _sources(fn: Any) -> list[tuple[str, str]]:
    """(filename, text) of the transform's code that this process knows (a cell it was defined in)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    lines = linecache.getlines(code.co_filename)
    return [(code.co_filename, "".join(lines))]


@dataclass
class _Epoch:
    seq: int
    feed: Any
    cell: int | None = None  # the (kept) cell it was opened in: its data job ends with that cell
    steps: int = 0
    reply: C.DataReply | None = None
    key: str = ""            # which epoch this is, whatever the attempt (see RankData.key)
    skipped: int = 0         # batches taken before a restart (jt.commit's position): not sent again
    taken: int = 0           # batches handed to the loop in this attempt
    lanes: int = 0           # the plan's data workers: a restart resumes with the same plan


class RankData:
    """This rank's data plane: its listener (made on first use), its open epochs, this cell's numbers."""

    def __init__(self, runtime: RankRuntime) -> None:
        from .receiver import Receiver

        self.runtime = runtime
        self.receiver = Receiver(runtime.bind_ip, runtime.plan.secret, tls=runtime.plan.tls is not None)
        self.cond = threading.Condition()
        self.epochs: dict[int, _Epoch] = {}
        self.cell: int | None = None
        self.seq = 0
        self.wait_s = self.rows = 0.0
        self.first_at: float | None = None
        self.opened: dict[str, int] = {}        # epoch key -> times batches() asked for it this cell
        self.read: dict[str, dict[str, int]] = {}  # epoch key -> where the loop is in it (what jt.commit saves)
        runtime.link.on_data(self._on_message)

    def _on_message(self, msg: C.DataReply | None) -> None:
        """The kernel's answer to an epoch (None: the channel closed, which answers every open epoch)."""
        with self.cond:
            if msg is None:
                for epoch in self.epochs.values():
                    _answer(epoch, {"t": C.DATA_ERROR, "seq": epoch.seq, "summary": "the kernel closed the channel",
                                    "traceback": ""})
            elif (asked := self.epochs.get(msg["seq"])) is not None:
                _answer(asked, msg)
            self.cond.notify_all()

    def current(self, epoch: _Epoch) -> bool:
        """Whether ``epoch`` can still be read: opened in this cell (a kept cell's data jobs end with it)."""
        return epoch.cell == self.runtime.cell

    def _new_cell(self) -> None:
        """Under the lock: a new kept cell counts its epochs and numbers afresh; the last cell's are over."""
        cell = self.runtime.cell
        if cell != self.cell:
            for stale in self.epochs.values():
                self.receiver.close_feed(stale.feed)
            self.epochs.clear()
            self.cell, self.seq, self.wait_s, self.rows, self.first_at = cell, 0, 0.0, 0.0, None
            self.opened, self.read = {}, {}

    def key(self, handle: DataFrameHandle, args: _Args) -> str:
        """The epoch's name across attempts: the DataFrame, the arguments that decide its rows and order, and how
        many times this cell asked for the same before (a second pass over one epoch is another epoch)."""
        what = json.dumps([handle.id, args.batch_size, args.columns, args.shuffle, args.seed, args.epoch,
                           args.drop_last])
        self.opened[what] = self.opened.get(what, 0) + 1
        return f"{what}#{self.opened[what]}"

    def positions(self) -> dict[str, dict[str, int]]:
        """Where the loop is in every epoch read so far (jt.commit saves it: a restart resumes there)."""
        with self.cond:
            live = {e.key: {"lanes": e.lanes, "steps": e.skipped + e.steps, "taken": e.skipped + e.taken}
                    for e in self.epochs.values() if e.key}
            return {**self.read, **live}

    def _resume(self, key: str) -> dict[str, int] | None:
        """This epoch's position in the commit the cell restored, if any."""
        checkpoints = self.runtime.checkpoints
        restored = checkpoints.restored if checkpoints is not None else None
        return (restored or {}).get(key)

    def open(self, handle: DataFrameHandle, args: _Args, transform: Callable[..., Any] | None) -> _Epoch:
        with self.cond:
            self._new_cell()
            key = self.key(handle, args)
            resume = self._resume(key)
            if resume is not None and resume["taken"] >= resume["steps"]:
                self.read[key] = dict(resume)  # read to its end before the commit: nothing of it comes again
                return _Epoch(0, None, self.cell, key=key, skipped=resume["taken"])
            self.seq += 1
            epoch = _Epoch(self.seq, self.receiver.open_feed(args.prefetch), self.cell, key=key,
                           skipped=resume["taken"] if resume else 0)
            self.epochs[epoch.seq] = epoch
        wanted: dict[str, Any] = dict(args.__dict__)
        if resume is not None:
            wanted["resume"] = {"lanes": resume["lanes"], "taken": resume["taken"]}
        msg: C.DataOpenMsg = {
            "t": C.DATA_OPEN, "seq": epoch.seq, "feed": epoch.feed.token, "handle": handle.id, "args": wanted,
            "transform": dumps(transform) if transform is not None else None,
            "transform_name": getattr(transform, "__qualname__", repr(transform))[:200],
            "sources": _sources(transform), "address": self.receiver.listener.address,
            "pin": self.receiver.listener.pin}
        self.runtime.client.post(msg, urgent=True)
        try:
            with self.cond:
                self.cond.wait_for(lambda: epoch.reply is not None)
        except BaseException:  # interrupted while waiting for the plan: the kernel stops what it started
            self.close(epoch, early=True)
            raise
        reply = epoch.reply
        if reply is None or reply["t"] == C.DATA_ERROR:
            self.close(epoch, early=False, tell=False)
            why = f"{reply['summary']}\n{reply['traceback']}" if reply is not None else "batches() failed"
            raise DataError(why.rstrip())
        epoch.steps, epoch.lanes = reply["steps"], reply.get("lanes", reply["workers"])
        return epoch

    def take(self, epoch: _Epoch) -> dict[str, Any]:
        from ..rank.profiler import input_mark  # on the rank only (the kernel never loads the rank runtime)

        if self.first_at is None:
            self.first_at = time.monotonic()
        before, rows = epoch.feed.wait_s, epoch.feed.rows
        try:
            with input_mark():   # --profile: the wait counts as input in the rank's trace
                batch = epoch.feed.take()
            epoch.taken += 1  # handed to the loop: a commit from here on counts it as read
            return batch
        finally:
            self.wait_s += epoch.feed.wait_s - before
            self.rows += epoch.feed.rows - rows

    def close(self, epoch: _Epoch, *, early: bool, tell: bool = True) -> None:
        if epoch.feed is None:
            return  # read before a restart: nothing was asked of the kernel
        with self.cond:
            self.epochs.pop(epoch.seq, None)
            if epoch.key:
                self.read[epoch.key] = {"lanes": epoch.lanes, "steps": epoch.skipped + epoch.steps,
                                        "taken": epoch.skipped + epoch.taken}
        self.receiver.close_feed(epoch.feed)
        if tell:
            self.runtime.client.post({"t": C.DATA_DONE, "seq": epoch.seq, "early": early}, urgent=True)


_lock = threading.Lock()


def _answer(epoch: _Epoch, msg: C.DataReply) -> None:
    """Under the lock: the first answer stands; an error also fails the epoch's feed (a reader waiting wakes)."""
    if msg["t"] == C.DATA_ERROR:
        epoch.feed.fail(f"{msg['summary']}\n{msg['traceback']}".rstrip())
    if epoch.reply is None:
        epoch.reply = msg


def _data() -> RankData:
    from ..rank.runtime import current  # only on a rank: the kernel imports this module for the API alone

    runtime = current()
    if runtime is None:
        raise DataError("batches() runs on the ranks of a %%distribute cell (or jt.run): outside a run there is no "
                        "data job to feed it")
    with _lock:
        if not isinstance(runtime.data, RankData):
            runtime.data = RankData(runtime)
        return runtime.data


def cell_numbers() -> tuple[float, float, int] | None:
    """(seconds waiting for data, seconds since this cell's first batch was asked for, rows) or None."""
    from ..rank.runtime import current

    runtime = current()
    data = runtime.data if runtime is not None else None
    if runtime is None or not isinstance(data, RankData) or data.first_at is None or data.cell != runtime.cell:
        return None
    return data.wait_s, time.monotonic() - data.first_at, int(data.rows)


class Batches:
    """An epoch of a DataFrame, batch by batch (``len()`` gives the steps every rank gets)."""

    def __init__(self, df: DataFrameHandle, args: _Args, transform: Callable[..., Any] | None) -> None:
        self._df, self._args, self._transform = df, args, transform
        self._opened: _Epoch | None = None

    def _open(self) -> _Epoch:
        data = _data()
        if self._opened is None or not data.current(self._opened):  # len() in an earlier kept cell: ask again
            self._opened = data.open(self._df, self._args, self._transform)
        return self._opened

    def __len__(self) -> int:
        return self._open().steps

    def __iter__(self) -> Iterator[dict[str, Any]]:
        epoch, self._opened = self._open(), None  # iterating again asks for the epoch again
        return _iterate(_data(), epoch)

    def __repr__(self) -> str:
        return f"batches({self._df!r}, batch_size={self._args.batch_size}, epoch={self._args.epoch})"


def _iterate(data: RankData, epoch: _Epoch) -> Iterator[dict[str, Any]]:
    from .convert import to_torch

    early = True
    try:
        for _ in range(epoch.steps):
            yield to_torch(data.take(epoch))
        early = False
    finally:
        data.close(epoch, early=early)


def batches(df: Any, batch_size: int, *, transform: Callable[..., Any] | None = None,
            columns: list[str] | None = None, shuffle: bool = True, seed: int = 0, epoch: int = 0,
            drop_last: bool = True, prefetch: int = 2) -> Batches:
    """An epoch of the notebook DataFrame ``df`` on this rank, as dicts of column name -> torch tensor.

    Call it on every rank with the same arguments (like a ``DistributedSampler``): every rank gets the same
    number of batches, each row goes to at most one rank, and with ``drop_last`` fewer than
    ``world_size * batch_size`` rows are left out (without it, every rank gets one smaller last batch).
    ``transform(pandas_df) -> pandas_df | dict`` runs on Spark executors, never on the ranks. ``shuffle``
    with ``seed`` and ``epoch`` gives a different, reproducible order each epoch (partitions in another
    order, rows shuffled within blocks of 1,024). At most ``prefetch`` batches wait in this rank.
    """
    args = _check(df, batch_size, transform, columns, shuffle, seed, epoch, drop_last, prefetch)
    return Batches(df, args, transform)
