"""Runs in each rank: receives fragments from data workers and hands out whole batches, in step order.

A rank holds one ``Receiver`` (a listener and a thread per data worker connection) for its whole life;
each ``batches()`` epoch on it is a ``Feed``. A connection reads a fragment's header, and reads its body
only once the fragment's step is within ``prefetch`` steps of the one the training loop waits for: until
then the bytes stay in the socket and the worker waits. So a rank never holds more than ``prefetch``
batches, and workers slow down with the slowest rank, not the other way round. A fragment that arrives
twice (a retried data task) or for a feed that is closed is read and dropped.
"""
from __future__ import annotations

import itertools
import random
import socket
import threading
import time
from typing import Any

from ..channel import protocol as P
from . import DataError
from .codec import HEADER, MAX_BODY, Header, decode, join
from .transport import Listener, accept_worker

__all__ = ["Feed", "Receiver"]


class Feed:
    """One ``batches()`` epoch on this rank: fragments in, whole batches out, at most ``prefetch`` steps held."""

    def __init__(self, token: int, prefetch: int) -> None:
        self.token, self.prefetch = token, prefetch
        self.next = 0                                  # the step the training loop takes next
        self.rows = 0                                  # rows handed to the training loop
        self.wait_s = 0.0                              # time the training loop spent waiting for data
        self._parts: dict[int, dict[int, dict[str, Any]]] = {}
        self._of: dict[int, int] = {}
        self._error: str | None = None
        self._closed = False
        self._cond = threading.Condition()

    def admit(self, step: int) -> bool:
        """A connection's next fragment is for ``step``: wait until the rank wants it. False: drop it."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or step < self.next + self.prefetch)
            return not self._closed and step >= self.next

    def put(self, header: Header, columns: dict[str, Any]) -> None:
        with self._cond:
            parts = self._parts.setdefault(header.step, {})
            if self._closed or header.step < self.next or header.index in parts:
                return  # late, or a retried task's copy: each fragment counts once
            parts[header.index] = columns
            self._of[header.step] = header.of
            self._cond.notify_all()

    def _ready(self) -> bool:
        of = self._of.get(self.next)
        return of is not None and len(self._parts.get(self.next, ())) == of

    def take(self) -> dict[str, Any]:
        """The next step's whole batch (waits for it); raises DataError if the data cannot come."""
        start = time.monotonic()
        with self._cond:
            try:
                self._cond.wait_for(lambda: self._error is not None or self._closed or self._ready())
            finally:
                self.wait_s += time.monotonic() - start
            if self._error is not None:
                raise DataError(self._error)
            if self._closed:
                raise DataError("the data feed was closed")
            parts = self._parts.pop(self.next)
            del self._of[self.next]
            self.next += 1
            self._cond.notify_all()
        batch = join([parts[i] for i in sorted(parts)])
        self.rows += _rows(batch)
        return batch

    def fail(self, message: str) -> None:
        with self._cond:
            self._error = self._error or message
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._parts.clear()
            self._cond.notify_all()


def _rows(batch: dict[str, Any]) -> int:
    for value in batch.values():
        return len(value)
    return 0


def _read_body(sock: Any, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    recv_into = getattr(sock, "recv_into", None)
    while got < n:
        if recv_into is not None:
            k = recv_into(view[got:], min(n - got, 1 << 22))
        else:
            chunk = sock.recv(min(n - got, 1 << 22))
            k = len(chunk)
            view[got:got + k] = chunk
        if not k:
            raise EOFError("the data worker closed the connection")
        got += k
    return buf


def _skip(sock: Any, n: int) -> None:
    while n > 0:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise EOFError("the data worker closed the connection")
        n -= len(chunk)


class Receiver:
    """A rank's listener for data workers and its open feeds. Lives as long as the rank process."""

    def __init__(self, host: str, secret: bytes, *, tls: bool = False) -> None:
        self.listener = Listener(host, secret, tls)
        self.refused = 0
        self._feeds: dict[int, Feed] = {}
        self._tokens = itertools.count(random.randrange(1, 1 << 30))
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept_loop, name="jtd-data-accept", daemon=True).start()

    def open_feed(self, prefetch: int) -> Feed:
        feed = Feed(next(self._tokens) & 0xFFFFFFFF, prefetch)
        with self._lock:
            self._feeds[feed.token] = feed
        return feed

    def close_feed(self, feed: Feed) -> None:
        feed.close()
        with self._lock:
            self._feeds.pop(feed.token, None)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                raw, _ = self.listener.sock.accept()
            except OSError:
                if self._closed:
                    return
                time.sleep(0.05)
                continue
            threading.Thread(target=self._serve, args=(raw,), name="jtd-data-conn", daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            accepted = accept_worker(raw, self.listener)
            if accepted is None:
                self.refused += 1
                return
            sock, _piece = accepted
            while True:
                header = Header.unpack(P.recv_exact(sock, HEADER.size))
                if header.body > MAX_BODY:
                    return
                with self._lock:
                    feed = self._feeds.get(header.feed)
                if feed is None or not feed.admit(header.step):
                    _skip(sock, header.body)
                    continue
                feed.put(header, decode(_read_body(sock, header.body)))
        except Exception:
            return  # the worker is done (or gone): its task says how it ended
        finally:
            raw.close()

    def close(self) -> None:
        self._closed = True
        with self._lock:
            feeds = list(self._feeds.values())
            self._feeds.clear()
        for feed in feeds:
            feed.close()
        self.listener.close()
