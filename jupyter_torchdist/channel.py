"""The kernel's end of the live channel: authenticated connections from ranks, one run each.

Every accepted connection proves it knows the run's secret before a single byte of it is
unpickled; after that, whatever it sends is stamped with the rank it authenticated as, so no
rank can speak for another. Messages land in a queue the supervisor drains.
"""
from __future__ import annotations

import hmac
import os
import queue
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from . import protocol as P

__all__ = ["ChannelServer", "Inbound"]

HANDSHAKE_TIMEOUT_S = 10.0
DEFAULT_MAX_FRAME = (1 << 31) - 1


@dataclass(frozen=True)
class Inbound:
    """One message from a rank (role 'rank') or its Spark task (role 'agent')."""
    rank: int
    role: str
    msg: dict[str, Any]
    at: float = field(default_factory=time.time)


class _Conn:
    def __init__(self, sock: socket.socket, rank: int, role: str) -> None:
        self.sock, self.rank, self.role = sock, rank, role
        self.lock = threading.Lock()


class ChannelServer:
    """Listens for the ranks of one run. Thread-safe; close() joins every thread it started."""

    def __init__(self, world_size: int, *, host: str = "127.0.0.1", secret: bytes | None = None,
                 max_frame: int = DEFAULT_MAX_FRAME, ssl_context: ssl.SSLContext | None = None,
                 inbox: "queue.SimpleQueue[Inbound] | None" = None) -> None:
        self.world_size = world_size
        self.secret = secret or P.new_secret()
        self.max_frame = max_frame
        self.inbox: queue.SimpleQueue[Inbound] = inbox if inbox is not None else queue.SimpleQueue()
        self.refused = 0
        self._ssl = ssl_context
        self._conns: dict[tuple[int, str], _Conn] = {}
        self._pending: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, 0))
        self._listener.listen(max(64, world_size * 2))
        self.address: tuple[str, int] = (host, self._listener.getsockname()[1])
        self._spawn(self._accept_loop, "jtd-accept")

    def _spawn(self, target: Any, name: str, *args: Any) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()]
            self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            if self._closed:
                sock.close()
                return
            self._spawn(self._serve, "jtd-conn", sock)

    def _handshake(self, sock: socket.socket) -> _Conn | None:
        sock.settimeout(HANDSHAKE_TIMEOUT_S)
        if self._ssl is not None:
            sock = self._ssl.wrap_socket(sock, server_side=True)
        nonce = os.urandom(P.NONCE_LEN)
        sock.sendall(P.MAGIC + nonce)
        hello = P.recv_exact(sock, P.HELLO_LEN)
        role, rank, mac = hello[:1], int.from_bytes(hello[1:5], "big"), hello[5:]
        if role not in (P.ROLE_RANK, P.ROLE_AGENT) or not 0 <= rank < self.world_size:
            return None
        if not hmac.compare_digest(mac, P.client_mac(self.secret, nonce, role, rank)):
            return None
        conn = _Conn(sock, rank, "rank" if role == P.ROLE_RANK else "agent")
        with self._lock:
            if self._closed or (rank, conn.role) in self._conns:
                return None  # one connection per rank and role per run
            self._conns[(rank, conn.role)] = conn
        sock.sendall(b"OK" + P.server_mac(self.secret, nonce))
        sock.settimeout(None)
        return conn

    def _serve(self, sock: socket.socket) -> None:
        with self._lock:
            self._pending.add(sock)
        try:
            conn = self._handshake(sock)
        except (OSError, EOFError, ssl.SSLError, ValueError):
            conn = None
        finally:
            with self._lock:
                self._pending.discard(sock)
        if conn is None:
            self.refused += 1
            _close(sock)
            return
        self.inbox.put(Inbound(conn.rank, conn.role, {"t": "connected"}))
        try:
            while True:
                frame = P.recv_frame(conn.sock, self.max_frame)
                for msg in frame if isinstance(frame, list) else [frame]:
                    if isinstance(msg, dict) and isinstance(msg.get("t"), str):
                        self.inbox.put(Inbound(conn.rank, conn.role, msg))
        except (OSError, EOFError, P.ProtocolError, ssl.SSLError):
            pass
        finally:
            with self._lock:
                if self._conns.get((conn.rank, conn.role)) is conn:
                    del self._conns[(conn.rank, conn.role)]
            _close(conn.sock)
            self.inbox.put(Inbound(conn.rank, conn.role, {"t": "disconnected"}))

    def send(self, rank: int, role: str, msg: dict[str, Any]) -> bool:
        """Send to one rank's connection; False if it is not (or no longer) connected."""
        with self._lock:
            conn = self._conns.get((rank, role))
        if conn is None:
            return False
        try:
            with conn.lock:
                P.send_frame(conn.sock, msg)
            return True
        except OSError:
            return False

    def connected(self, role: str) -> set[int]:
        with self._lock:
            return {r for (r, ro) in self._conns if ro == role}

    def close(self) -> None:
        self._closed = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            socks = [c.sock for c in self._conns.values()] + list(self._pending)
            threads = list(self._threads)
        for sock in socks:
            _close(sock)
        for t in threads:
            if t is not threading.current_thread():
                t.join(timeout=HANDSHAKE_TIMEOUT_S + 1)

    def __enter__(self) -> "ChannelServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
