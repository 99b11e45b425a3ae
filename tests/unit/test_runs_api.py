"""The runs panel's REST API in a real Jupyter server (a subprocess with a runtime directory of its own), on a
registry this test writes as a kernel's publisher would: authenticated like every Jupyter handler, an unchanged list
costs a bodiless 304, the list is gzipped, a stop reaches the kernel's inbox, a report comes as the snapshot or a page,
and what does not exist or has ended says so. How pip enables the extension is checked too. (A second server with
another runtime directory, seeing none of these runs: ``tests/browser/test_runs_panel.py``, with real kernels.)"""
from __future__ import annotations

import gzip
import json
import os
import socket
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_torchdist.core import held_folder as F
from jupyter_torchdist.panel.asks import Inbox
from jupyter_torchdist.panel.registry import FORMAT, VERSION, kernel_file, reports_dir

from ..support.runs_api import ApiServer

ROOT = Path(__file__).resolve().parents[2]
KERNEL = "feedbeef-0000-4000-8000-000000000001"
SNAPSHOT = {"version": 1, "title": "%%distribute -n 2", "status": "running", "headline": "", "backend": "local",
            "options": {}, "world_size": 2, "ranks": [], "notices": []}

pytestmark = pytest.mark.slow   # a server's start: seconds


def _entry(number: int, state: str, **more: Any) -> dict[str, Any]:
    return {"kind": "run", "id": f"feedbeef-{number}", "number": number, "kernel_id": KERNEL, "notebook": "a.ipynb",
            "state": state, "submitted": time.time() - number, "step": 5, "total": 100, "backend": "local",
            "cell": "%%distribute -n 2 --background", **more}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    pytest.importorskip("jupyter_server")
    s = ApiServer(tmp_path_factory.mktemp("runs-api"))
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def registry(server: ApiServer) -> Path:
    folder = F.registry_dir(server.runtime, create=True)
    assert folder is not None
    entries = [_entry(1, "running"), _entry(2, "done", report=None)]
    F.write_json(kernel_file(folder, KERNEL), {
        "format": FORMAT, "version": VERSION, "kernel_id": KERNEL, "pid": os.getpid(), "host": socket.gethostname(),
        "notebook": "a.ipynb", "started": time.time(), "updated": time.time(), "ended": None, "entries": entries})
    return folder


def test_the_list_needs_the_servers_credentials(server: ApiServer, registry: Path) -> None:
    assert server.call("GET", "runs", token=False)[0] == 403
    status, headers, body = server.call("GET", "runs")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    listed = json.loads(body)
    assert [(e["id"], e["state"], e["kernel"]) for e in listed] == [("feedbeef-1", "running", "live"),
                                                                    ("feedbeef-2", "done", "live")]
    assert {"id", "notebook", "state", "step", "total", "backend", "kernel_id"} <= set(listed[0])


def test_an_unchanged_list_costs_a_bodiless_304_and_a_large_one_is_gzipped(server: ApiServer, registry: Path) -> None:
    _, headers, _ = server.call("GET", "runs")
    status, _, body = server.call("GET", "runs", headers={"If-None-Match": headers["Etag"]})
    assert (status, body) == (304, b"")
    many = [_entry(n, "running", cell="%%distribute -n 2 --background  # " + "x" * 80) for n in range(1, 51)]
    record = F.read_json(kernel_file(registry, KERNEL))
    F.write_json(kernel_file(registry, KERNEL), {**record, "entries": many})
    status, changed, body = server.call("GET", "runs", headers={"If-None-Match": headers["Etag"],
                                                                "Accept-Encoding": "gzip"})
    assert status == 200 and changed["Etag"] != headers["Etag"] and changed["Content-Encoding"] == "gzip"
    assert len(json.loads(gzip.decompress(body))) == 50 and len(body) < len(gzip.decompress(body)) / 4


def _with_kernel(inbox: Inbox, answer: Any, call: Any) -> tuple[int, dict[str, str], bytes]:
    """``call()`` to the server while a thread plays the kernel's publisher: ``answer(request)`` for each request it
    takes, until the call returns."""
    done = threading.Event()

    def kernel() -> None:
        while not done.is_set():
            for asked in inbox.take():
                answer(asked)
            time.sleep(0.05)

    thread = threading.Thread(target=kernel)
    thread.start()
    try:
        return call()  # type: ignore[no-any-return]
    finally:
        done.set()
        thread.join()


def test_a_stop_reaches_the_kernels_inbox(server: ApiServer, registry: Path) -> None:
    taken: list[dict[str, Any]] = []
    status, _, body = _with_kernel(Inbox(registry, KERNEL), taken.append,
                                   lambda: server.call("POST", "runs/feedbeef-1/stop"))
    assert status == 200 and json.loads(body) == {"id": "feedbeef-1", "taken": True}
    assert [(t["kind"], t["target"], t["by"]) for t in taken] == [("stop", "feedbeef-1", "the runs panel")]
    assert server.call("POST", "runs/feedbeef-2/stop")[0] == 409, "it has ended"
    assert server.call("POST", "runs/nope-1/stop")[0] == 404
    assert server.call("POST", "runs/feedbeef-1/stop", token=False)[0] == 403


def test_a_report_as_the_snapshot_or_as_a_page(server: ApiServer, registry: Path) -> None:
    assert server.call("GET", "runs/feedbeef-2/report")[0] == 404, "no report written"
    reports_dir(registry, KERNEL).mkdir(exist_ok=True)
    done = dict(SNAPSHOT, status="succeeded", value_repr="'trained'")
    F.write_json(reports_dir(registry, KERNEL) / "feedbeef-2.json",
                 {"mime": "application/vnd.jupyter-torchdist.run+json", "data": done, "at": time.time()})
    status, headers, body = server.call("GET", "runs/feedbeef-2/report")
    report = json.loads(body)
    assert status == 200 and report["data"]["status"] == "succeeded" and report["state"] == "done"
    assert server.call("GET", "runs/feedbeef-2/report", headers={"If-None-Match": headers["Etag"]})[0] == 304
    status, headers, page = server.call("GET", "runs/feedbeef-2/report?format=html")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b"&#x27;trained&#x27;" in page or b"'trained'" in page
    assert "script-src" not in headers.get("Content-Security-Policy", "") and "default-src 'none'" in \
        headers["Content-Security-Policy"], "the page runs no script"


def test_a_get_of_a_running_runs_report_asks_nothing_and_a_post_asks_for_a_fresh_one(server: ApiServer,
                                                                                      registry: Path) -> None:
    inbox = Inbox(registry, KERNEL)
    status, _, body = server.call("GET", "runs/feedbeef-1/report")
    assert status == 404 and b"POST to this address" in body and inbox.take() == [], "a GET leaves no request"

    def write(asked: dict[str, Any]) -> None:   # the kernel writes the report asked for
        F.write_json(reports_dir(registry, KERNEL) / f"{asked['target']}.json",
                     {"mime": "application/vnd.jupyter-torchdist.run+json", "data": SNAPSHOT, "at": time.time()})

    status, _, body = _with_kernel(inbox, write, lambda: server.call("POST", "runs/feedbeef-1/report"))
    assert status == 200 and json.loads(body) == {"id": "feedbeef-1", "written": True}
    status, _, body = server.call("GET", "runs/feedbeef-1/report")
    assert status == 200 and json.loads(body)["data"]["status"] == "running"
    assert server.call("POST", "runs/feedbeef-1/report", token=False)[0] == 403


def test_a_named_pipe_where_a_report_should_be_blocks_nothing(server: ApiServer, registry: Path) -> None:
    """A read that would block (a named pipe; a slow network folder) delays at most its own request."""
    reports_dir(registry, KERNEL).mkdir(mode=0o700, exist_ok=True)
    F.remove(reports_dir(registry, KERNEL) / "feedbeef-2.json")
    os.mkfifo(reports_dir(registry, KERNEL) / "feedbeef-2.json")
    t0 = time.monotonic()
    status, _, _ = server.call("GET", "runs/feedbeef-2/report")
    assert status == 404 and time.monotonic() - t0 < 10, "the pipe is not a report: never opened for reading"
    assert server.call("GET", "runs")[0] == 200


def test_malformed_files_cost_only_themselves(server: ApiServer, registry: Path) -> None:
    """A record nested past any parser's depth, a pid no process has, times that are not numbers, a link that would
    run script: the other runs still list, stop and report; the bad fields or files are dropped."""
    good = F.read_json(kernel_file(registry, KERNEL))
    (registry / "kernel-deep.json").write_text("[" * 200_000 + "]" * 200_000)
    os.chmod(registry / "kernel-deep.json", 0o600)
    for kernel_id, change in (("big-pid", {"pid": 10**30}), ("bad-times", {"updated": "abc"})):
        F.write_json(registry / f"kernel-{kernel_id}.json", {**good, "kernel_id": kernel_id, **change})
    bad_entries = [_entry(7, "running", submitted="abc", id="bad-entry-7", kernel_id="odd",
                          links=[{"kind": "spark", "label": "Spark UI", "url": "javascript:alert(1)"},
                                 {"kind": "mlflow", "label": "MLflow", "url": "https://mlflow.example/#/runs/1"}]),
                   {"id": 12}, "not an entry", {"id": "../../etc", "state": "running"}]
    F.write_json(registry / "kernel-odd.json", {**good, "kernel_id": "odd", "entries": bad_entries})
    status, _, body = server.call("GET", "runs")
    assert status == 200
    listed = {e["id"]: e for e in json.loads(body)}
    assert set(listed) == {"feedbeef-1", "feedbeef-2", "bad-entry-7"}
    assert listed["bad-entry-7"]["submitted"] == 0.0 and listed["bad-entry-7"]["links"] == [
        {"kind": "mlflow", "label": "MLflow", "url": "https://mlflow.example/#/runs/1"}], "no javascript: link"
    assert server.call("GET", "runs/feedbeef-2/report")[0] == 404
    assert server.call("POST", "runs/feedbeef-2/stop")[0] == 409


def test_pip_enables_the_server_extension() -> None:
    """The config file that enables it is installed where Jupyter reads its configuration."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    shared = project["tool"]["hatch"]["build"]["targets"]["wheel"]["shared-data"]
    source = "jupyter-config/jupyter_server_config.d/jupyter_torchdist.json"
    assert shared[source] == "etc/jupyter/jupyter_server_config.d/jupyter_torchdist.json"
    config = json.loads((ROOT / source).read_text())
    assert config == {"ServerApp": {"jpserver_extensions": {"jupyter_torchdist.panel": True}}}
    from jupyter_torchdist.panel import _jupyter_server_extension_points

    assert _jupyter_server_extension_points() == [{"module": "jupyter_torchdist.panel.server"}]
