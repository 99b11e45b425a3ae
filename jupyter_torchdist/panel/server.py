"""The Jupyter server extension: the runs panel's REST API, authenticated like every Jupyter handler.

``GET  /jupyter-torchdist/api/runs[?all=1]``       the user's runs and sweeps (``registry.RunEntry``), newest first; an
                                                  ``ETag``, so a poll with ``If-None-Match`` of an unchanged list is a
                                                  bodiless 304; gzip when the client takes it
``POST /jupyter-torchdist/api/runs/<id>/stop``     ask the run's (or sweep's) kernel to stop it: 200 once the kernel
                                                  took the request, 202 if it has not yet (it will: its publisher looks
                                                  every 0.25 s, busy or not)
``GET  /jupyter-torchdist/api/runs/<id>/report[?format=html]``  the run's report as last written: ``{"mime", "data",
                                                  "at"}`` (the snapshot the cell's report draws), or as a page
``POST /jupyter-torchdist/api/runs/<id>/report``   ask a running run's kernel to write its report now: 200 once written,
                                                  202 if not yet (a GET then reads it); a GET never asks anything

It reads the registry in the server's own runtime directory (``ServerApp.runtime_dir``: where its kernels' connection
files are), never another. Every read and write of the registry runs on a worker thread, never in the server's event
loop: a slow home folder, or a named pipe where a report should be, delays only that request. Polls of the list and
the report do not count as the user's activity (an idle server is still culled while a panel stays open); a stop
does.
"""
from __future__ import annotations

import asyncio
import gzip
import html
import os
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any, Final

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from .asks import ask
from ..core.held_folder import RegistryError, read_json, registry_dir
from .listing import Found, as_json, etag_of, find, going, list_runs
from .registry import clean, reports_dir
from .reports import SWEEP_MIME, report_name

__all__ = ["RunsHandler", "StopHandler", "ReportHandler", "_load_jupyter_server_extension"]

AUTH_RESOURCE: Final = "kernels"   # a run is what a kernel does: whoever may use the kernels may see and stop them
GZIP_FROM: Final = 1024
TAKEN_WAIT_S: Final = 3.0
_RUN_ID: Final = r"(?P<run_id>[A-Za-z0-9._-]{1,200})"


def _folder(runtime: str) -> Path | None:
    try:
        return registry_dir(Path(runtime))
    except RegistryError as exc:
        raise web.HTTPError(500, str(exc)) from None


def _find(runtime: str, run_id: str) -> tuple[Path, Found]:
    folder = _folder(runtime)
    hit = find(folder, run_id)
    if hit is None or folder is None:
        raise web.HTTPError(404, f"no run {run_id} in this user's registry")
    return folder, hit


class _Handler(APIHandler):
    auth_resource = AUTH_RESOURCE

    @property
    def runtime(self) -> str:
        return str(self.settings["jupyter_torchdist_runtime_dir"])

    async def notebooks(self) -> dict[str, str]:
        """Kernel id -> its notebook's path now (a notebook renamed after its kernel started has a new one)."""
        sessions = getattr(self.serverapp, "session_manager", None)
        try:
            listed = await sessions.list_sessions() if sessions is not None else []
        except Exception:
            return {}
        return {s["kernel"]["id"]: s["path"] for s in listed if s.get("kernel") and s.get("path")}

    async def found(self, run_id: str) -> tuple[Path, Found]:
        return await asyncio.to_thread(_find, self.runtime, run_id)

    def send(self, body: bytes, content_type: str = "application/json") -> None:
        if len(body) >= GZIP_FROM and "gzip" in self.request.headers.get("Accept-Encoding", ""):
            body = gzip.compress(body, compresslevel=5)
            self.set_header("Content-Encoding", "gzip")
        self.set_header("Vary", "Accept-Encoding")
        self.finish(body, set_content_type=content_type)

    def unchanged(self, etag: str) -> bool:
        """Answer 304 when the client has this version already."""
        self.set_header("ETag", etag)
        self.set_header("Cache-Control", "no-cache")
        if etag in self.request.headers.get("If-None-Match", ""):
            self.set_status(304)
            self.finish()
            return True
        return False


def _listed(runtime: str, everything: bool, notebooks: dict[str, str], root: str | None) -> bytes:
    return as_json(list_runs(_folder(runtime), everything, notebooks, root=root))


class RunsHandler(_Handler):
    _track_activity = False

    @web.authenticated
    @authorized
    async def get(self) -> None:
        everything = self.get_argument("all", "0").lower() in ("1", "true", "yes")
        root = getattr(self.serverapp, "root_dir", None)
        body = await asyncio.to_thread(_listed, self.runtime, everything, await self.notebooks(),
                                       root if isinstance(root, str) else None)
        if not self.unchanged(etag_of(body)):
            self.send(body)


def _target(hit: Found) -> str:
    return hit.entry["id"]


async def _until(done: Callable[[], bool], timeout: float) -> bool:
    """Wait (at most ``timeout``) for ``done()``, asked on a worker thread every 50 ms; whether it came true."""
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(done):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def _ask(folder: Path, hit: Found, kind: str, run_id: str) -> Path:
    try:
        return ask(folder, hit.record["kernel_id"], kind, _target(hit), by="the runs panel")
    except FileNotFoundError:
        raise web.HTTPError(409, f"the kernel of run {run_id} takes no requests: it has ended") from None


class StopHandler(_Handler):
    @web.authenticated
    @authorized
    async def post(self, run_id: str) -> None:
        folder, hit = await self.found(run_id)
        if not going(hit.entry):
            raise web.HTTPError(409, f"run {run_id} has already ended ({hit.entry.get('state')})")
        path = await asyncio.to_thread(_ask, folder, hit, "stop", run_id)
        taken = await _until(lambda: not os.path.lexists(path), TAKEN_WAIT_S)
        self.set_status(200 if taken else 202)
        self.finish(as_json({"id": run_id, "taken": taken}))


def _report_path(folder: Path, hit: Found) -> Path:
    return reports_dir(folder, hit.record["kernel_id"]) / report_name(_target(hit))


def _report_of(folder: Path, hit: Found) -> Any:
    return read_json(_report_path(folder, hit))


def _written_at(folder: Path, hit: Found) -> float:
    try:
        return os.lstat(_report_path(folder, hit)).st_mtime
    except OSError:
        return 0.0


class ReportHandler(_Handler):
    _track_activity = False

    @property
    def content_security_policy(self) -> str:
        """The page form draws with inline styles and SVG, and runs no script."""
        return super().content_security_policy + "; style-src 'unsafe-inline'; img-src data:"

    @web.authenticated
    @authorized
    async def get(self, run_id: str) -> None:
        folder, hit = await self.found(run_id)
        report = await asyncio.to_thread(_report_of, folder, hit)
        if not isinstance(report, dict) or "data" not in report:
            raise web.HTTPError(404, f"run {run_id} has no report yet" +
                                (": POST to this address asks its kernel for one" if going(hit.entry) else ""))
        report["state"] = hit.entry.get("state")
        if self.get_argument("format", "json") == "html":
            self.finish(_page(run_id, report), set_content_type="text/html; charset=utf-8")
            return
        body = as_json(report)
        if not self.unchanged(etag_of(body)):
            self.send(body)

    @web.authenticated
    @authorized
    async def post(self, run_id: str) -> None:
        """A running run's report is written when asked: ask, and wait (a little) for it."""
        folder, hit = await self.found(run_id)
        if not going(hit.entry) or hit.kernel != "live":
            self.finish(as_json({"id": run_id, "written": False}))   # an ended run's report is written as it ends
            return
        before = await asyncio.to_thread(_written_at, folder, hit)
        await asyncio.to_thread(_ask, folder, hit, "report", run_id)
        written = await _until(lambda: _written_at(folder, hit) > before, TAKEN_WAIT_S)
        self.set_status(200 if written else 202)
        self.finish(as_json({"id": run_id, "written": written}))


def _page(run_id: str, report: dict[str, Any]) -> str:
    data: dict[str, Any] = report["data"] if isinstance(report.get("data"), dict) else {}
    if report.get("mime") == SWEEP_MIME:
        from ..views.compare import sweep_html

        body = sweep_html(data)
    else:
        from ..views.report_html import report_html

        body = report_html(data)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>run {html.escape(run_id)}</title></head>"
            f"<body style='font-family:system-ui,sans-serif;margin:16px'>{body}</body></html>")


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Add the handlers; the registry is read from the server's runtime directory."""
    web_app = serverapp.web_app
    web_app.settings["jupyter_torchdist_runtime_dir"] = serverapp.runtime_dir
    runs = url_path_join(web_app.settings["base_url"], "jupyter-torchdist", "api", "runs")
    web_app.add_handlers(".*$", [(runs, RunsHandler), (f"{runs}/{_RUN_ID}/stop", StopHandler),
                                 (f"{runs}/{_RUN_ID}/report", ReportHandler)])
    try:
        folder = registry_dir(Path(serverapp.runtime_dir))
        if folder is not None:
            clean(folder)
    except OSError as exc:
        serverapp.log.warning("jupyter-torchdist: the runs registry cannot be read: %s", exc)
    serverapp.log.info("jupyter-torchdist: the runs panel's API is at %s", runs)
