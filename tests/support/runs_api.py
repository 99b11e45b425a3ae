"""A plain Jupyter server (no front end) on loopback with a runtime directory of its own, and calls to the runs
panel's API on it (``jupyter_torchdist/panel/server.py``): for the API's tests, and as "another user's server" beside
the browser tests' JupyterLab."""
from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def runs_api(base: str, token: str, path: str = "runs", method: str = "GET", auth: bool = True,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """``(status, headers, body)`` of a call to ``<base>/jupyter-torchdist/api/<path>``; error statuses are returned,
    not raised."""
    request = urllib.request.Request(f"{base}/jupyter-torchdist/api/{path}", method=method,
                                     data=b"" if method == "POST" else None,
                                     headers={**({"Authorization": f"token {token}"} if auth else {}),
                                              **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def listed(base: str, token: str, everything: bool = False) -> list[dict[str, Any]]:
    status, _, body = runs_api(base, token, "runs?all=1" if everything else "runs")
    assert status == 200, (status, body[:500])
    return json.loads(body)


class ApiServer:
    """``jupyter server`` with the extension enabled on its command line and ``JUPYTER_RUNTIME_DIR`` of its own."""

    def __init__(self, tmp: Path) -> None:
        self.runtime = tmp / "runtime"
        self.token = secrets.token_hex(8)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(self.runtime), JUPYTER_CONFIG_DIR=str(tmp / "config"))
        self.log = open(tmp / "server.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter_server", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
             f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={tmp}", "--allow-root",
             "--ServerApp.jpserver_extensions={'jupyter_torchdist.panel': True}"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                if self.call("GET", "runs")[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError((tmp / "server.log").read_text()[-3000:])
            time.sleep(0.2)

    def call(self, method: str, path: str, token: bool = True, headers: dict[str, str] | None = None
             ) -> tuple[int, dict[str, str], bytes]:
        return runs_api(self.base, self.token, path, method, token, headers)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log.close()
