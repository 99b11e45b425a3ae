"""The channel's one reading loop: every authenticated connection read by one thread through a selector.

A thread per connection made a thousand ranks a thousand threads taking turns at the GIL (1,024 simulated ranks
kept the kernel at 1.5 cores, issue 35); one loop reads whatever is ready, cuts it into frames and hands each
frame on. Sockets stay blocking (sends from the supervisor's thread keep their timeout): a socket the selector
reports readable is read once, which does not block. TLS connections are read raw and decrypted here.
"""
from __future__ import annotations

import pickle
import selectors
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any, Protocol

from .tls import TLSStream

__all__ = ["Reader", "READ_CHUNK"]

READ_CHUNK = 1 << 18  # bytes read from a connection at a time
_LEN = struct.Struct(">I")


class Readable(Protocol):
    """What the loop needs of a connection (``server._Conn``)."""

    sock: Any              # what the peer's bytes go through: the raw socket, or a TLSStream over it
    raw: socket.socket
    buf: bytearray         # bytes read, not yet a whole frame


class Reader:
    """Reads the connections ``add``-ed to it until they end or ``stop``. ``on_frame(conn, frame)`` gets every whole
    frame unpickled (None for one that cannot be: the connection is then dropped); ``on_gone(conn)`` each
    connection that ended, once."""

    def __init__(self, on_frame: Callable[[Any, Any], None], on_gone: Callable[[Any], None], max_frame: int) -> None:
        self.on_frame, self.on_gone, self.max_frame = on_frame, on_gone, max_frame
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self._fresh: list[Readable] = []  # handed over, for the loop to register
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="jtd-read", daemon=True)
        self._thread.start()

    def add(self, conn: Readable) -> bool:
        """Read ``conn`` from now on; False once stopping (the caller ends it)."""
        with self._lock:
            if self._stopping:
                return False
            self._fresh.append(conn)
        self._wake()
        return True

    def stop(self) -> None:
        """End every connection (each goes to ``on_gone``) and the loop."""
        with self._lock:
            self._stopping = True
        self._wake()

    def join(self, timeout: float) -> None:
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
        with self._lock:
            left, self._fresh = self._fresh, []
        for conn in left:
            self.on_gone(conn)
        self._wake_r.close()
        self._wake_w.close()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _take_fresh(self) -> bool:
        """Register what was handed over since the last wake-up; False once stopping."""
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass
        with self._lock:
            fresh, self._fresh = self._fresh, []
            stopping = self._stopping
        for conn in fresh:
            self._sel.register(conn.raw, selectors.EVENT_READ, conn)
            if isinstance(conn.sock, TLSStream) and not self._frames(conn, b""):  # read along with the handshake
                self._drop(conn)
        return not stopping

    def _loop(self) -> None:
        try:
            while True:
                for key, _ in self._sel.select():
                    if key.data is None:
                        if not self._take_fresh():
                            return
                    elif not self._pump(key.data):
                        self._drop(key.data)
        finally:
            for key in list(self._sel.get_map().values()):
                if key.data is not None:
                    self._drop(key.data)
            self._sel.close()

    def _drop(self, conn: Readable) -> None:
        try:
            self._sel.unregister(conn.raw)
        except (KeyError, ValueError):
            return
        self.on_gone(conn)

    def _pump(self, conn: Readable) -> bool:
        """Read what ``conn`` has (its socket is readable); False when it ended or broke the protocol."""
        try:
            data = conn.raw.recv(READ_CHUNK)
        except OSError:
            return False
        return bool(data) and self._frames(conn, data)

    def _frames(self, conn: Readable, data: bytes) -> bool:
        """Add ``data`` to what ``conn`` sent and hand on every whole frame; False on a broken frame (oversized or
        not unpicklable: ``on_frame`` gets None) or at the end of its TLS session."""
        if isinstance(conn.sock, TLSStream):
            plain = conn.sock.decrypt(data)
            if plain is None:
                return False
            data = plain
        buf = conn.buf
        buf += data
        at = 0
        while len(buf) - at >= _LEN.size:
            (length,) = _LEN.unpack_from(buf, at)
            if length > self.max_frame:
                self.on_frame(conn, None)
                return False
            if len(buf) - at - _LEN.size < length:
                break
            payload = bytes(buf[at + _LEN.size:at + _LEN.size + length])
            at += _LEN.size + length
            try:
                frame = pickle.loads(payload)
            except Exception:
                self.on_frame(conn, None)
                return False
            self.on_frame(conn, frame)
        del buf[:at]
        return True
