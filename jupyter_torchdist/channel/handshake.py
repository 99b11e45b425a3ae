"""The ranks' and agents' end of the channel handshake: connect, prove the run's secret, check the kernel's.

With the run's pinned certificate the connection is TLS, and only that exact certificate is
accepted before any secret-derived byte is sent.
"""
from __future__ import annotations

import hmac
import socket
from typing import Union

from ..core.contract import TLSPin
from . import protocol as P
from .tls import TLSStream, client_context

__all__ = ["connect", "handshake", "Stream"]

Stream = Union[socket.socket, TLSStream]


def handshake(raw: socket.socket, secret: bytes, rank: int, role: bytes, tls: TLSPin | None,
              peer: str = "the kernel") -> Stream:
    """TLS first when pinned, then the mutual HMAC challenge; returns the stream to talk on."""
    sock: Stream = raw
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
        raise P.ProtocolError(f"{peer} refused this connection (wrong run secret?)")
    return sock


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
    try:
        sock = handshake(raw, secret, rank, role, tls)
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
