"""A rank's end of the live channel.

Training code only ever appends to in-memory queues (``post``); one sender thread moves
batches to the socket. Progress is droppable, oldest first, when the kernel is slow; logs
are kept up to a byte budget; results and failures are sent synchronously at the end.
Nothing here raises into training code.
"""
from __future__ import annotations

import collections
import hmac
import socket
import threading
import time
from typing import Any, Union

from . import protocol as P
from .tls import TLSPin, TLSStream, client_context

__all__ = ["RankClient", "connect"]

PROGRESS_QUEUE = 256
PROGRESS_PER_BATCH = 16   # progress points kept per batch: the view draws ~10 frames/s, the curve needs no more
BATCH_INTERVAL_S = 0.05   # at most ~20 batches a second: the sender stays off the training thread's cores
LOG_BUDGET_BYTES = 8 << 20

Stream = Union[socket.socket, TLSStream]


def connect(address: tuple[str, int], secret: bytes, rank: int, role: bytes, *,
            timeout: float = 30.0, tls: TLSPin | None = None) -> Stream:
    """Open an authenticated connection to the kernel (mutual HMAC challenge).

    With ``tls`` (the run's pinned certificate) the connection is TLS and only that exact
    certificate is accepted, before any secret-derived byte is sent.
    """
    try:
        raw = socket.create_connection(address, timeout=timeout)
    except OSError as exc:
        raise ConnectionError(
            f"rank {rank} on {socket.gethostname()} could not reach the kernel's channel at "
            f"{address[0]}:{address[1]} ({exc}). Executors must be able to connect to the driver there: "
            "set spark.driver.host to an address they can reach, and allow that port range in the firewall."
        ) from None
    sock: Stream = raw
    try:
        if tls is not None:
            stream = TLSStream(raw, client_context(tls), server_side=False)
            stream.handshake()
            stream.check_pin(tls)
            sock = stream
        greeting = P.recv_exact(sock, len(P.MAGIC) + P.NONCE_LEN)
        if not greeting.startswith(P.MAGIC):
            raise P.ProtocolError("not a jupyter-torchdist channel")
        nonce = greeting[len(P.MAGIC):]
        sock.sendall(role + rank.to_bytes(4, "big") + P.client_mac(secret, nonce, role, rank))
        reply = P.recv_exact(sock, 2 + P.MAC_LEN)
        if reply[:2] != b"OK" or not hmac.compare_digest(reply[2:], P.server_mac(secret, nonce)):
            raise P.ProtocolError("the kernel refused this rank (wrong run secret?)")
        raw.settimeout(None)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    except EOFError:
        raw.close()
        raise P.ProtocolError(f"the kernel at {address[0]}:{address[1]} closed the connection during the "
                              "handshake: it refused this rank (another run's secret, or this rank is "
                              "already connected)") from None
    except BaseException:
        raw.close()
        raise


def _plain(value: Any) -> Any:
    """A metric as a plain number or short string; tensors are read here, off the training thread."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value if not isinstance(value, str) else value[:80]
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except Exception:
            pass
    return str(value)[:80]


def _thin(queued: list[dict[str, Any]], keep: int) -> list[dict[str, Any]]:
    """At most ``keep`` progress points, evenly spread and always the latest; other messages all stay."""
    points = [i for i, m in enumerate(queued) if m.get("t") == "progress"]
    if len(points) <= keep:
        return queued
    chosen = {points[round(j * (len(points) - 1) / (keep - 1))] for j in range(keep)}
    return [m for i, m in enumerate(queued) if m.get("t") != "progress" or i in chosen]


class RankClient:
    """Non-blocking reporting from training code to the kernel."""

    def __init__(self, sock: Stream) -> None:
        self.sock = sock
        self.dropped_progress = 0
        self.dropped_log_bytes = 0
        self._progress: collections.deque[dict[str, Any]] = collections.deque(maxlen=PROGRESS_QUEUE)
        self._logs: collections.deque[dict[str, Any]] = collections.deque()
        self._log_bytes = 0
        self._cond = threading.Condition()
        self._closing = False
        self._broken = False
        self._thread = threading.Thread(target=self._run, name="jtd-sender", daemon=True)
        self._thread.start()

    def post_progress(self, msg: dict[str, Any]) -> None:
        """Queue a progress message; if the queue is full the oldest one is dropped.

        Anything else posted here (a state change) is never dropped: it queues with the logs."""
        with self._cond:
            if msg.get("t") != "progress":
                self._logs.append(msg)
            else:
                if len(self._progress) == PROGRESS_QUEUE:
                    self.dropped_progress += 1
                self._progress.append(msg)
            self._cond.notify()

    def post_log(self, msg: dict[str, Any]) -> None:
        """Queue a log line; past the byte budget lines are counted, not kept."""
        size = len(msg.get("text", ""))
        with self._cond:
            if self._log_bytes + size > LOG_BUDGET_BYTES:
                self.dropped_log_bytes += size
                return
            self._log_bytes += size
            self._logs.append(msg)
            self._cond.notify()

    def _take(self, not_before: float) -> list[dict[str, Any]] | None:
        with self._cond:
            while not self._closing:
                left = not_before - time.monotonic()
                if (self._progress or self._logs) and left <= 0:
                    break
                self._cond.wait(left if left > 0 else None)  # a rate limit, woken at once by finish()
            if not (self._progress or self._logs):
                return None
            batch = list(self._logs) + _thin(list(self._progress), PROGRESS_PER_BATCH)
            self._logs.clear()
            self._progress.clear()
            self._log_bytes = 0
            return batch

    def _run(self) -> None:
        not_before = 0.0
        while True:
            batch = self._take(not_before)
            not_before = time.monotonic() + BATCH_INTERVAL_S
            if batch is None:
                return
            if self._broken:
                continue
            try:
                for msg in batch:
                    if msg.get("t") == "progress" and msg.get("metrics"):
                        msg["metrics"] = {str(k): _plain(v) for k, v in msg["metrics"].items()}
                P.send_frame(self.sock, batch)
            except Exception:
                self._broken = True  # the kernel went away; training goes on, reports are dropped

    def finish(self, final: list[dict[str, Any]]) -> None:
        """Flush what is queued, then send the final messages synchronously."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()
        if self.dropped_progress or self.dropped_log_bytes:
            final = [{"t": "dropped", "progress": self.dropped_progress,
                      "log_bytes": self.dropped_log_bytes}] + final
        if not self._broken:
            P.send_frame(self.sock, final)
