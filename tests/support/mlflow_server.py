"""A real MLflow tracking server for the tests: ``mlflow server`` with a SQLite store and proxied artifacts, on
loopback, that a test can stop and start again on the same port and store (a server that goes down mid-run)."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

__all__ = ["MlflowServer", "tracking_server"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MlflowServer:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = _free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 90.0) -> None:
        mlflow = Path(sys.executable).with_name("mlflow")
        log = open(self.folder / "server.log", "ab")
        self.proc = subprocess.Popen(
            [str(mlflow), "server", "--backend-store-uri", f"sqlite:///{self.folder / 'mlflow.db'}",
             "--artifacts-destination", str(self.folder / "artifacts"), "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "1"],
            cwd=self.folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            # MLflow 3's server-side job runner (huey consumers polling for prompt-optimisation and trace-rollup jobs)
            # is not tracking: off, it saves about 90 CPU-seconds a CI run (the tracking API is the same)
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {(self.folder / 'server.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.uri + "/health", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"mlflow server did not answer within {timeout} s")

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        self.proc = None


@contextlib.contextmanager
def tracking_server(folder: Path, **env: str | None) -> Iterator[MlflowServer]:
    """One real MLflow server for a test module: this process's environment points at it (``env`` sets MLflow's own
    retry knobs; None removes a variable), the module's tracking journals go to a cache folder of its own, and a
    fresh shipper sends them. All of it undone at the end, the shipper's journals let go."""
    from jupyter_torchdist.tracking import shipper as shipping

    srv = MlflowServer(folder)
    srv.start()
    wanted = {"MLFLOW_TRACKING_URI": srv.uri, "XDG_CACHE_HOME": str(folder / "cache"), **env}
    old = {k: os.environ.get(k) for k in wanted}
    _set(wanted)
    shipping._One.shipper = None   # this module's journals in this module's folder
    try:
        yield srv
    finally:
        if shipping._One.shipper is not None:
            shipping._One.shipper.close()
            shipping._One.shipper = None
        srv.stop()
        _set(old)


def _set(values: dict[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
