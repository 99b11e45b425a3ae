"""Wire format of the live channel, shared by the kernel (server) and the ranks (clients).

Handshake (before anything is unpickled):
  server -> client : MAGIC + 32-byte nonce
  client -> server : role (1 byte) + rank (4 bytes) + HMAC(secret, b"client" + nonce + role + rank)
  server -> client : b"OK" + HMAC(secret, b"server" + nonce)      (mutual: ranks only talk to their kernel)
Then frames both ways: 4-byte big-endian length + pickle of one message dict or a list of them.
The secret is per run, so a connection from another run, or a replayed handshake, is refused.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import socket
import struct
from typing import Any

__all__ = [
    "MAGIC", "NONCE_LEN", "MAC_LEN", "ROLE_RANK", "ROLE_AGENT", "ProtocolError",
    "new_secret", "client_mac", "server_mac", "recv_exact", "send_frame", "recv_frame", "encode_frame",
]

MAGIC = b"JTD1"
NONCE_LEN = 32
MAC_LEN = 32
HELLO_LEN = 1 + 4 + MAC_LEN
ROLE_RANK = b"R"   # the process running the user's code
ROLE_AGENT = b"A"  # the Spark task that forked it and watches its exit
_LEN = struct.Struct(">I")


class ProtocolError(Exception):
    """The peer broke the protocol (bad auth, oversized or malformed frame)."""


def new_secret() -> bytes:
    return os.urandom(32)


def client_mac(secret: bytes, nonce: bytes, role: bytes, rank: int) -> bytes:
    return hmac.new(secret, b"client" + nonce + role + struct.pack(">I", rank), hashlib.sha256).digest()


def server_mac(secret: bytes, nonce: bytes) -> bytes:
    return hmac.new(secret, b"server" + nonce, hashlib.sha256).digest()


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return bytes(buf)


def encode_frame(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _LEN.pack(len(data)) + data


def send_frame(sock: socket.socket, obj: Any) -> None:
    sock.sendall(encode_frame(obj))


def recv_frame(sock: socket.socket, max_bytes: int) -> Any:
    (length,) = _LEN.unpack(recv_exact(sock, _LEN.size))
    if length > max_bytes:
        raise ProtocolError(f"frame of {length} bytes is over the limit of {max_bytes}")
    data = recv_exact(sock, length)
    try:
        return pickle.loads(data)
    except Exception as exc:
        raise ProtocolError(f"malformed frame: {type(exc).__name__}") from None
