"""The channel tests' own peers: inbox and socket helpers, and a recording relay (an eavesdropper's view)."""
from __future__ import annotations

import queue
import socket
import threading
import time

from jupyter_torchdist.channel import protocol as P
from jupyter_torchdist.channel.server import ChannelServer
from jupyter_torchdist.core.contract import Inbound

__all__ = ["GREETING", "Recorder", "messages", "read_until_closed", "refused", "until"]

GREETING = len(P.MAGIC) + P.NONCE_LEN


def messages(server: ChannelServer, timeout: float = 5.0) -> list[Inbound]:
    """Everything in the inbox, waiting up to ``timeout`` for the first message."""
    out = [server.inbox.get(timeout=timeout)]
    while True:
        try:
            out.append(server.inbox.get(timeout=0.2))
        except queue.Empty:
            return out


def until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def read_until_closed(sock: socket.socket, timeout: float = 10.0) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


class Recorder:
    """A TCP relay in front of a server that records what each client sent (an eavesdropper's view)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.sent: list[bytearray] = []   # per connection: client -> server bytes
        self.received: list[bytearray] = []  # per connection: server -> client bytes
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = self._listener.getsockname()[:2]
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        self._start(self._accept)

    def _start(self, fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        self._threads.append(t)
        t.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._socks += [client, upstream]
            up, down = bytearray(), bytearray()
            self.sent.append(up)
            self.received.append(down)
            self._start(self._pump, client, upstream, up)
            self._start(self._pump, upstream, client, down)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, log: bytearray) -> None:
        try:
            while data := src.recv(65536):
                log += data
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        for s in self._socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._threads:
            t.join(5)
        for s in self._socks:
            s.close()


def refused(server: ChannelServer, before: int, count: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.refused >= before + count:
            return True
        time.sleep(0.02)
    return False
