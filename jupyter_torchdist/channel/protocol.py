"""Wire format of the live channel, shared by the kernel (server) and the ranks (clients).

Handshake (before anything is unpickled):
  server -> client : MAGIC + 32-byte nonce
  client -> server : role (1 byte) + rank (4 bytes) + HMAC(secret, b"client" + nonce + role + rank)
  server -> client : b"OK" + HMAC(secret, b"server" + nonce)      (mutual: ranks only talk to their kernel)
Then frames both ways: 4-byte big-endian length + pickle of one message dict or a list of them.
The secret is per run and the nonce per connection, so a connection from another run, or a replayed
handshake, is refused. With channel TLS (tls.py) all of this runs inside a TLS session whose server
certificate the ranks pin.

Frames are unpickled only after the handshake (the peer proved it holds the run's secret, so it is
one of our own ranks); ``check_message`` then drops messages of a type the peer's role may not send
(``contract.SENDS``) and messages whose core fields have the wrong types, so a buggy rank can neither make
the kernel's bookkeeping raise nor speak for its agent or the channel.
"""
from __future__ import annotations

import hashlib
import hmac
import math
import os
import pickle
import socket
import struct
import time
from collections.abc import Collection
from typing import Any, Protocol

__all__ = [
    "MAGIC", "NONCE_LEN", "MAC_LEN", "ROLE_RANK", "ROLE_AGENT", "ROLE_DATA", "ROLE_FILES", "ProtocolError", "Deadline",
    "HELLO_LEN", "new_secret", "client_mac", "server_mac", "recv_exact", "send_frame", "recv_frame",
    "encode_frame", "check_message",
]

MAGIC = b"JTD1"
NONCE_LEN = 32
MAC_LEN = 32
HELLO_LEN = 1 + 4 + MAC_LEN
ROLE_RANK = b"R"   # the process running the user's code
ROLE_AGENT = b"A"  # the Spark task that forked it and watches its exit
ROLE_DATA = b"D"   # a data worker sending batches to a rank (the data plane: data/transport.py)
ROLE_FILES = b"F"  # a rank's host fetching the run's code by digest (rank/code_setup.py); any number per rank
_LEN = struct.Struct(">I")


class ProtocolError(Exception):
    """The peer broke the protocol (bad auth, oversized or malformed frame)."""


def new_secret() -> bytes:
    return os.urandom(32)


def client_mac(secret: bytes, nonce: bytes, role: bytes, rank: int) -> bytes:
    return hmac.new(secret, b"client" + nonce + role + struct.pack(">I", rank), hashlib.sha256).digest()


def server_mac(secret: bytes, nonce: bytes) -> bytes:
    return hmac.new(secret, b"server" + nonce, hashlib.sha256).digest()


class Wire(Protocol):
    """What the protocol needs of a connection: a plain socket or a ``tls.TLSStream``."""

    def recv(self, n: int, /) -> bytes: ...
    def sendall(self, data: bytes, /) -> Any: ...


class Deadline:
    """A raw socket during the handshake: every wait counts against one deadline, so a peer
    trickling a byte at a time cannot hold a thread past the deadline."""

    def __init__(self, sock: socket.socket, seconds: float) -> None:
        self.sock, self.until = sock, time.monotonic() + seconds

    def _arm(self) -> None:
        left = self.until - time.monotonic()
        if left <= 0:
            raise TimeoutError("the handshake took too long")
        self.sock.settimeout(left)

    def recv(self, n: int) -> bytes:
        self._arm()
        return self.sock.recv(n)

    def sendall(self, data: bytes) -> None:
        self._arm()
        self.sock.sendall(data)

    def shutdown(self, how: int) -> None:
        self.sock.shutdown(how)

    def close(self) -> None:
        self.sock.close()


def recv_exact(sock: Wire, n: int) -> bytes:
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


def send_frame(sock: Wire, obj: Any) -> None:
    sock.sendall(encode_frame(obj))


def recv_frame(sock: Wire, max_bytes: int) -> Any:
    (length,) = _LEN.unpack(recv_exact(sock, _LEN.size))
    if length > max_bytes:
        raise ProtocolError(f"frame of {length} bytes is over the limit of {max_bytes}")
    data = recv_exact(sock, length)
    try:
        return pickle.loads(data)
    except Exception as exc:
        raise ProtocolError(f"malformed frame: {type(exc).__name__}") from None


_NONE = type(None)
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "at": (int, float), "step": (int, float, _NONE), "total": (int, float, _NONE),
    "pid": (int, _NONE), "child": (int, _NONE), "store_port": (int,),
    "host": (str,), "ip": (str,), "summary": (str,), "traceback": (str,), "text": (str,), "stream": (str,),
    "state": (str,), "signal": (str, _NONE), "repr": (str, _NONE),
    "value": (bytes, bytearray, _NONE), "metrics": (dict, _NONE),
    # debugging (contract/debug.py): where a rank is, and its pdb
    "frames": (list,), "collective": (str, _NONE), "waited_s": (int, float, _NONE), "collective_s": (int, float),
    "kind": (str,), "prompt": (str,), "post_mortem": (bool,),
}
_NUMERIC = frozenset(k for k, types in _FIELD_TYPES.items() if int in types)


def check_message(msg: Any, kinds: Collection[str] | None = None) -> str | None:
    """Why ``msg`` is not a well-formed message, or None: a dict with a short string "t" (one of ``kinds``
    when given), and the fields the kernel reads (times, steps, ports, texts) of the right type, numbers
    finite."""
    if not isinstance(msg, dict):
        return f"a message must be a dict, not {type(msg).__name__}"
    t = msg.get("t")
    if not isinstance(t, str) or not 0 < len(t) <= 64:
        return "a message needs a short string field 't'"
    if kinds is not None and t not in kinds:
        return f"this peer may not send {t!r} messages"
    for key, value in msg.items():
        if not isinstance(key, str):
            return f"field names must be strings, not {type(key).__name__}"
        allowed = _FIELD_TYPES.get(key)
        if allowed is None or (value is None and _NONE in allowed):
            continue
        if not isinstance(value, allowed) or (key in _NUMERIC and isinstance(value, bool)):
            return f"field {key!r} has type {type(value).__name__}"
        if key in _NUMERIC and not math.isfinite(value):  # type: ignore[arg-type]
            return f"field {key!r} is not a finite number"
    return None
