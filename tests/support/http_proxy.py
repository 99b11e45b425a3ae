"""A loopback HTTP proxy in front of a real server (an MLflow tracking server), for faults a test needs at a given
call: every request is forwarded as it came (method, path, headers, body) and every answer returned as it came,
until a rule says otherwise.

Rules, each applied once, to the first request whose path ends with ``path``:

- ``vanish_after(path, seconds)``: the request reaches the server, its answer is lost (the connection is cut), and
  the proxy goes away for ``seconds`` (connections refused, open ones cut), then answers again on the same port.
- ``cut(path)``: the request never reaches the server; its connection is cut.

``refuse_without(header_value)`` makes it an authenticating proxy: every request without
``Authorization: <header_value>`` is answered 401, as a server behind a login would.
"""
from __future__ import annotations

import http.client
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

__all__ = ["HttpProxy"]

_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade", "te", "trailer"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpProxy:
    def __init__(self, upstream: str | None) -> None:
        self.upstream = urlparse(upstream) if upstream else None
        self.port = _free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.rules: list[dict[str, Any]] = []
        self.seen: list[str] = []          # "METHOD path" of every request, in order
        self.password: str | None = None
        self._server: ThreadingHTTPServer | None = None
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.start()

    # -- rules ----------------------------------------------------------------------------------------------------
    def vanish_after(self, path: str, seconds: float) -> threading.Event:
        done = threading.Event()
        self.rules.append({"path": path, "do": "vanish", "seconds": seconds, "done": done})
        return done

    def cut(self, path: str) -> threading.Event:
        done = threading.Event()
        self.rules.append({"path": path, "do": "cut", "done": done})
        return done

    def refuse_without(self, authorization: str) -> None:
        self.password = authorization

    # -- life -----------------------------------------------------------------------------------------------------
    def start(self) -> None:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with proxy._lock:
                    proxy._sockets.add(self.connection)

            def finish(self) -> None:
                with proxy._lock:
                    proxy._sockets.discard(self.connection)
                try:
                    super().finish()
                except OSError:
                    pass

            def _any(self) -> None:
                proxy._handle(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Gone: the port refuses connections, open ones are cut."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        with self._lock:
            for s in list(self._sockets):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._sockets.clear()

    # -- forwarding -----------------------------------------------------------------------------------------------
    def _rule(self, path: str) -> dict[str, Any] | None:
        with self._lock:
            for rule in self.rules:
                if not rule["done"].is_set() and path.split("?")[0].endswith(rule["path"]):
                    rule["done"].set()
                    return rule
        return None

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else None
        self.seen.append(f"{h.command} {h.path}")
        if self.password is not None and h.headers.get("Authorization") != self.password:
            payload = b"<html><body>401 Unauthorized: log in</body></html>"
            h.send_response(401, "Unauthorized")
            h.send_header("WWW-Authenticate", 'Basic realm="tracking"')
            h.send_header("Content-Type", "text/html")
            h.send_header("Content-Length", str(len(payload)))
            h.end_headers()
            h.wfile.write(payload)
            return
        rule = self._rule(h.path)
        if rule is not None and rule["do"] == "cut":
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)
            return
        if self.upstream is None:
            h.send_error(502)
            return
        conn = http.client.HTTPConnection(self.upstream.hostname or "127.0.0.1", self.upstream.port, timeout=60)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP}
        conn.request(h.command, h.path, body=body, headers=headers)
        answer = conn.getresponse()
        data = answer.read()
        conn.close()
        if rule is not None and rule["do"] == "vanish":
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)   # the server did it; the caller never hears
            threading.Thread(target=self._away, args=(rule["seconds"],), daemon=True).start()
            return
        h.send_response(answer.status, answer.reason)
        for k, v in answer.getheaders():
            if k.lower() not in _HOP and k.lower() != "content-length":
                h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _away(self, seconds: float) -> None:
        self.stop()
        time.sleep(seconds)
        self.start()
