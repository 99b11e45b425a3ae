"""The kernel's end of the live channel: authenticated connections from ranks, one run each.

Every accepted connection proves it knows the run's secret before a single byte of it is
unpickled; after that, whatever it sends is stamped with the rank it authenticated as, so no
rank can speak for another. Messages land in a queue the supervisor drains.

A thread per connection does the handshake (a slow or hostile peer holds only its own thread, for at most
``HANDSHAKE_TIMEOUT_S``); past it, one thread reads every connection through a selector. A thousand ranks
then cost one reading thread, not a thousand threads taking turns at the GIL (issue 35: with a thread per
connection, 1,024 simulated ranks kept the kernel at 1.5 cores).

It binds one address, never a wildcard: 127.0.0.1 for a local master, the driver's address on a
cluster. With ``tls=True`` every connection is TLS with a per-run certificate the ranks pin.
When a rank's agent (its Spark task) vanishes without reporting the rank's exit, the channel says
so at once as a ``lost`` message (or ``stopped``, if the kernel had told it to stop), instead of
leaving the run to Spark's own, later and vaguer, error.
"""
from __future__ import annotations

import errno
import hmac
import ipaddress
import os
import queue
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, cast

from ..core import contract as C
from ..core.contract import Inbound, Role, TLSPin
from . import protocol as P
from .handshake import Stream
from .reader import Reader
from .tls import ServerIdentity, TLSStream, make_identity, server_context

__all__ = ["ChannelServer", "HANDSHAKE_TIMEOUT_S", "MAX_PENDING", "SEND_TIMEOUT_S"]

HANDSHAKE_TIMEOUT_S = 10.0  # an unauthenticated connection gets this long in all to prove itself
SEND_TIMEOUT_S = 10.0       # a peer that stops reading cannot block the kernel longer than this
MAX_PENDING = 256           # unauthenticated connections at once; more are closed on arrival
DEFAULT_MAX_FRAME = (1 << 31) - 1

class _Conn:
    def __init__(self, sock: Stream, raw: socket.socket, rank: int, role: Role) -> None:
        self.sock, self.raw, self.rank, self.role = sock, raw, rank, role
        self.buf = bytearray()          # bytes read, not yet a whole frame
        self.lock = threading.Lock()
        self.info: C.AgentHelloMsg | None = None  # the agent's own report: host, pid
        self.exited = False             # the agent reported the rank's exit
        self.stopping = False           # the kernel told this agent to stop its rank


class _Files:
    """An authenticated connection that only fetches the run's code (``ROLE_FILES``)."""

    def __init__(self, sock: Stream) -> None:
        self.sock = sock


class _Slot:
    """The socket (plain or TLS) of one connection still in its handshake, so close() can wake it."""

    def __init__(self, sock: Stream) -> None:
        self.sock = sock


def _bind_address(host: str) -> tuple[int, Any]:
    """(family, sockaddr) for ``host``; refuses wildcards, which would expose the channel on every interface."""
    try:
        infos = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ValueError(f"the channel cannot listen on {host!r}: {exc}") from None
    family, _, _, _, sockaddr = infos[0]
    if ipaddress.ip_address(str(sockaddr[0]).split("%")[0]).is_unspecified:
        raise ValueError(f"the channel must listen on one address the executors reach (e.g. spark.driver.host), "
                         f"not on every interface ({host!r})")
    return family, sockaddr


def _shutdown(sock: Any) -> None:
    """Wake whatever thread is blocked on ``sock``; that thread closes it."""
    raw = sock.sock if isinstance(sock, TLSStream) else sock
    try:
        raw.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _close(sock: Any) -> None:
    _shutdown(sock)
    try:
        sock.close()
    except OSError:
        pass


class ChannelServer:
    """Listens for the ranks of one run. Thread-safe; close() joins every thread it started."""

    def __init__(self, world_size: int, *, host: str = "127.0.0.1", secret: bytes | None = None,
                 max_frame: int = DEFAULT_MAX_FRAME, tls: bool | ServerIdentity = False,
                 inbox: queue.SimpleQueue[Inbound] | None = None, watcher: str = "the agent process",
                 lost_hint: str = "", files: Callable[[str], bytes | None] | None = None) -> None:
        self.world_size = world_size
        self.files = files  # a digest's bytes (the run's code: kernel/code_ship.blob), for ROLE_FILES connections
        self.watcher, self.lost_hint = watcher, lost_hint  # how to name a lost agent (launcher's words)
        self.secret = secret or P.new_secret()
        self.max_frame = max_frame
        self.inbox: queue.SimpleQueue[Inbound] = inbox if inbox is not None else queue.SimpleQueue()
        self.refused = 0    # connections that failed the handshake (or came when too many were pending)
        self.malformed = 0  # frames or messages from authenticated peers that were dropped
        self.tls_pin: TLSPin | None = None
        self._ssl = None
        if tls:
            identity = tls if isinstance(tls, ServerIdentity) else make_identity(host)
            self._ssl = server_context(identity)
            self.tls_pin = identity.pin()
        self._conns: dict[tuple[int, str], _Conn] = {}
        self._seen: set[tuple[int, str]] = set()  # every rank and role that ever connected to this run
        self._pending: set[_Slot] = set()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False
        self._stop: C.StopMsg | None = None  # once the run is stopping, every agent gets this
        family, sockaddr = _bind_address(host)
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(sockaddr)
        self._listener.listen(max(64, world_size * 2))
        self.address: tuple[str, int] = (host, self._listener.getsockname()[1])
        self._reader = Reader(self._messages, self._gone, max_frame)
        self._accept_thread = self._spawn(self._accept_loop, "jtd-accept")

    @property
    def bound(self) -> tuple[str, int]:
        """The address the listener is actually bound to (what /proc/net/tcp shows)."""
        return self._listener.getsockname()[:2]

    def _spawn(self, target: Any, name: str, *args: Any) -> threading.Thread:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()]
            self._threads.append(t)
        t.start()
        return t

    def _count(self, what: str) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + 1)

    # -- accepting ------------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        try:
            while not self._closed:
                try:
                    sock, _ = self._listener.accept()
                except OSError as exc:
                    if self._closed or exc.errno not in _TRANSIENT_ACCEPT_ERRORS:
                        return
                    if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                        time.sleep(0.05)  # out of fds or memory: back off instead of spinning
                    continue
                slot = _Slot(sock)
                with self._lock:
                    admitted = not self._closed and len(self._pending) < MAX_PENDING
                    if admitted:
                        self._pending.add(slot)
                if not admitted:
                    self._count("refused")
                    _close(sock)
                    continue
                self._spawn(self._serve, "jtd-conn", slot)
        finally:
            self._listener.close()

    def _handshake(self, slot: _Slot) -> _Conn | _Files | None:
        raw = slot.sock
        assert isinstance(raw, socket.socket)
        timed = P.Deadline(raw, HANDSHAKE_TIMEOUT_S)
        sock: Any = timed
        if self._ssl is not None:
            sock = slot.sock = TLSStream(timed, self._ssl, server_side=True)  # type: ignore[arg-type]
            sock.handshake()
        nonce = os.urandom(P.NONCE_LEN)
        sock.sendall(P.MAGIC + nonce)
        hello = P.recv_exact(sock, P.HELLO_LEN)
        role, rank, mac = hello[:1], int.from_bytes(hello[1:5], "big"), hello[5:]
        if role not in (P.ROLE_RANK, P.ROLE_AGENT, P.ROLE_FILES) or not 0 <= rank < self.world_size:
            return None
        if not hmac.compare_digest(mac, P.client_mac(self.secret, nonce, role, rank)):
            return None
        if role == P.ROLE_FILES:  # not a rank's own connection: served on this thread, then closed
            return self._files_connection(sock, raw, nonce)
        stream: Stream = sock if isinstance(sock, TLSStream) else raw
        conn = _Conn(stream, raw, rank, C.RANK if role == P.ROLE_RANK else C.AGENT)
        with conn.lock:  # a send() to this connection waits until our "OK" is out
            with self._lock:
                if self._closed or (rank, conn.role) in self._seen:
                    return None  # one connection per rank and role per run, ever: a rank never runs twice (a
                    #              Spark job submitted again, e.g. by py4j retrying a call an interrupt cut off)
                self._conns[(rank, conn.role)] = conn
                self._seen.add((rank, conn.role))
            try:
                sock.sendall(b"OK" + P.server_mac(self.secret, nonce))
                if isinstance(sock, TLSStream):
                    sock.sock = raw  # past the handshake: no deadline
                raw.settimeout(None)
                # blocking reads, but a send to a peer that stopped reading fails after SEND_TIMEOUT_S
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", int(SEND_TIMEOUT_S), 0))
            except BaseException:
                with self._lock:
                    self._conns.pop((rank, conn.role), None)
                raise
        return conn

    def _files_connection(self, sock: Any, raw: socket.socket, nonce: bytes) -> _Files:
        sock.sendall(b"OK" + P.server_mac(self.secret, nonce))
        if isinstance(sock, TLSStream):
            sock.sock = raw
        raw.settimeout(SEND_TIMEOUT_S * 6)  # a host that stops reading a large bundle is dropped after a minute
        return _Files(sock if isinstance(sock, TLSStream) else raw)

    def _send_files(self, sock: Stream) -> None:
        """Answer one host's requests for the run's code by digest (one frame each way), then close."""
        try:
            while True:
                try:
                    req = P.recv_frame(sock, 1 << 12)
                except (EOFError, OSError, P.ProtocolError):
                    return
                digest = req.get("digest") if isinstance(req, dict) and req.get("t") == C.FETCH else None
                reply: C.BlobMsg = {"t": C.BLOB, "data": None}
                if isinstance(digest, str) and self.files is not None:
                    try:
                        reply["data"] = self.files(digest)
                    except Exception as exc:
                        reply["error"] = str(exc)
                P.send_frame(sock, reply)
        except OSError:
            return

    def _serve(self, slot: _Slot) -> None:
        conn = None
        try:
            conn = self._handshake(slot)
        except Exception:
            conn = None
        finally:
            with self._lock:
                self._pending.discard(slot)
        if conn is None:
            self._count("refused")
            _close(slot.sock)
            return
        if isinstance(conn, _Files):
            self._send_files(conn.sock)
            _close(conn.sock)
            return
        self.inbox.put(Inbound(conn.rank, conn.role, {"t": C.CONNECTED}))
        with self._lock:
            late_stop = self._stop if conn.role == C.AGENT else None
        if late_stop is not None and not conn.stopping:  # connected after the run began stopping: stop it too
            self.send(conn.rank, C.AGENT, late_stop)
        with self._lock:
            closing = self._closed
        if closing or not self._reader.add(conn):
            self._gone(conn)

    def _gone(self, conn: _Conn) -> None:
        """A connection ended (EOF, a broken frame, close()): say so, and what it means for its rank."""
        with self._lock:
            if self._conns.get((conn.rank, conn.role)) is conn:
                del self._conns[(conn.rank, conn.role)]
            closing = self._closed
        # reported before the socket closes, so the peer seeing EOF implies the kernel already knows
        self.inbox.put(Inbound(conn.rank, conn.role, {"t": C.DISCONNECTED}))
        if conn.role == C.AGENT and not conn.exited and not closing:
            # told to stop, then gone (Spark's cancel killed it first): stopped, not a failure
            gone: C.StoppedMsg | C.LostMsg = {"t": C.STOPPED} if conn.stopping else self._lost_message(conn)
            self.inbox.put(Inbound(conn.rank, C.BACKEND, gone))
        _close(conn.sock)

    def _messages(self, conn: _Conn, frame: Any) -> None:
        """A whole frame from ``conn`` (the reading loop's thread): each well-formed message on to the inbox."""
        if frame is None:
            self._count("malformed")
            return
        for raw in frame if isinstance(frame, list) else [frame]:
            msg = self._admit(conn, raw)
            if msg is not None:
                self.inbox.put(Inbound(conn.rank, conn.role, msg))

    def _admit(self, conn: _Conn, raw: Any) -> C.RankMessage | C.AgentMessage | None:
        """``raw`` as the message it is, if its connection's role may send it and its fields have the right
        types (None, counted, if not); stamped with the connection's rank."""
        if P.check_message(raw, C.SENDS[conn.role]) is not None:
            self._count("malformed")
            return None
        raw["rank"] = conn.rank  # what a connection says about itself cannot name another rank
        msg = cast("C.RankMessage | C.AgentMessage", raw)
        if msg["t"] == C.AGENT_HELLO:
            conn.info = msg
        elif msg["t"] == C.EXIT:
            conn.exited = True
        return msg

    # -- the supervisor's side ------------------------------------------------------------------
    def send(self, rank: int, role: Role, msg: C.OutboundMessage) -> bool:
        """Send to one rank's connection; False if it is not (or no longer) connected."""
        with self._lock:
            conn = self._conns.get((rank, role))
        if conn is None:
            return False
        if msg["t"] == C.STOP:
            conn.stopping = True
            with self._lock:
                self._stop = self._stop or msg.copy()  # the supervisor stops every agent at once
        try:
            with conn.lock:
                P.send_frame(conn.sock, msg)
            return True
        except OSError:
            _shutdown(conn.sock)  # a peer that stopped reading is treated as gone
            return False

    def stop_all(self, reason: str, spare: set[int] | frozenset[int] = frozenset()) -> set[int]:
        """Tell every agent to stop its rank, now and on connecting later. Returns the ranks told now.

        Ranks in ``spare`` already said how they ended and are exiting by themselves: killing them
        would only replace their own exit status with our SIGKILL."""
        msg: C.StopMsg = {"t": C.STOP, "reason": reason}
        with self._lock:
            self._stop = msg
            ranks = {r for (r, role) in self._conns if role == C.AGENT and r not in spare}
        return {r for r in ranks if self.send(r, C.AGENT, msg)}

    def _lost_message(self, conn: _Conn) -> C.LostMsg:
        """Why a rank is lost when its agent vanished without reporting the rank's exit."""
        pid, host = (conn.info.get("pid"), conn.info.get("host")) if conn.info is not None else (None, None)
        where = f" (pid {pid} on {host or 'its host'})" if pid is not None else ""
        summary = (f"{self.watcher} running rank {conn.rank}{where} died before reporting how the rank ended: "
                   f"it was killed, ran out of memory, or its machine went away. {self.lost_hint}").strip()
        return {"t": C.LOST, "at": time.time(), "traceback": "", "summary": summary}

    def connected(self, role: Role) -> set[int]:
        with self._lock:
            return {r for (r, ro) in self._conns if ro == role}

    def close(self) -> None:
        """Stop listening, end every connection (each said DISCONNECTED) and wait for every thread it started."""
        with self._lock:
            self._closed = True
            socks = [s.sock for s in self._pending]
            threads = list(self._threads)
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept(); the accept thread closes it
        except OSError:
            pass
        self._reader.stop()  # the reading loop ends every connection it holds
        for sock in socks:
            _shutdown(sock)
        for t in threads:
            if t is not threading.current_thread():
                t.join(timeout=HANDSHAKE_TIMEOUT_S + 1)
        # a connection that raced close() (accepted, not yet registered) is woken here
        with self._lock:
            late = [s.sock for s in self._pending]
            threads = [t for t in self._threads if t.is_alive()]
        for sock in late:
            _shutdown(sock)
        for t in threads:
            if t is not threading.current_thread():
                t.join(timeout=HANDSHAKE_TIMEOUT_S + 1)
        self._reader.join(HANDSHAKE_TIMEOUT_S + 1)

    def __enter__(self) -> ChannelServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_TRANSIENT_ACCEPT_ERRORS = {errno.ECONNABORTED, errno.EPROTO, errno.EINTR, errno.EMFILE, errno.ENFILE,
                            errno.ENOBUFS, errno.ENOMEM}



