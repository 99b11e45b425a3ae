"""The data plane's connections: data workers (Spark tasks) connect to the ranks that train on their batches.

The rank listens (one address: 127.0.0.1 when every rank is on the kernel's host, else the address its
channel to the kernel uses; never every interface), and every connection proves it holds the run's
secret with the channel's mutual HMAC challenge (role ``D``) before the rank reads anything else from it.
With channel TLS on, each rank makes its own certificate when it opens its listener (its key never
leaves the rank) and the kernel hands its fingerprint to the data workers, which pin it.
"""
from __future__ import annotations

import hmac
import os
import socket
import struct
from typing import Any

from ..channel import protocol as P
from ..channel.handshake import Stream, handshake
from ..channel.tls import ServerIdentity, TLSStream, make_identity, server_context
from ..core.contract import TLSPin

__all__ = ["Listener", "accept_worker", "connect_to_rank", "HANDSHAKE_TIMEOUT_S", "SEND_TIMEOUT_S"]

HANDSHAKE_TIMEOUT_S = 10.0
SEND_TIMEOUT_S = 3600.0  # a live rank that stops reading for this long (hung) fails its workers; a dead one at once


class Listener:
    """A rank's listening socket for data workers, with its TLS identity when the channel uses TLS."""

    def __init__(self, host: str, secret: bytes, tls: bool) -> None:
        self.secret = secret
        self.identity: ServerIdentity | None = make_identity(host) if tls else None
        self.ssl = server_context(self.identity) if self.identity is not None else None
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.bind((host, 0))
        self.sock.listen(128)
        self.address: tuple[str, int] = (host, self.sock.getsockname()[1])

    @property
    def pin(self) -> TLSPin | None:
        return self.identity.pin() if self.identity is not None else None

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def accept_worker(raw: socket.socket, listener: Listener) -> tuple[Stream, int] | None:
    """The rank's side of the handshake: (stream, the worker's piece id), or None if it failed to prove itself."""
    timed = P.Deadline(raw, HANDSHAKE_TIMEOUT_S)
    sock: Any = timed
    try:
        if listener.ssl is not None:
            sock = TLSStream(timed, listener.ssl, server_side=True)  # type: ignore[arg-type]
            sock.handshake()
        nonce = os.urandom(P.NONCE_LEN)
        sock.sendall(P.MAGIC + nonce)
        hello = P.recv_exact(sock, P.HELLO_LEN)
        role, piece, mac = hello[:1], int.from_bytes(hello[1:5], "big"), hello[5:]
        if role != P.ROLE_DATA or not hmac.compare_digest(mac, P.client_mac(listener.secret, nonce, role, piece)):
            return None
        sock.sendall(b"OK" + P.server_mac(listener.secret, nonce))
    except (OSError, EOFError, TimeoutError, ConnectionError):
        return None
    if isinstance(sock, TLSStream):
        sock.sock = raw
    raw.settimeout(None)
    return (sock if isinstance(sock, TLSStream) else raw), piece


def connect_to_rank(address: tuple[str, int], secret: bytes, piece: int, pin: TLSPin | None,
                    rank: int) -> Stream:
    """A data worker's authenticated connection to ``rank``'s listener."""
    try:
        raw = socket.create_connection(address, timeout=HANDSHAKE_TIMEOUT_S)
    except OSError as exc:
        raise ConnectionError(f"a data worker on {socket.gethostname()} could not reach rank {rank}'s data "
                              f"listener at {address[0]}:{address[1]} ({exc}): executors must be able to "
                              "connect to each other (as Spark's shuffle does).") from None
    try:
        sock = handshake(raw, secret, piece, P.ROLE_DATA, pin, peer=f"rank {rank}")
        raw.settimeout(None)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", int(SEND_TIMEOUT_S), 0))
        return sock
    except BaseException:
        raw.close()
        raise
