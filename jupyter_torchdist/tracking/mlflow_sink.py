"""MLflow's sink: a run's records become one MLflow run, through ``MlflowClient`` with explicit run ids (the
notebook's own active run, if it has one, is never touched).

**Where.** MLflow's own rules choose the server (``MLFLOW_TRACKING_URI``, ``mlflow.set_tracking_uri`` in the notebook,
else its local default), asked when the run is recorded, in the kernel that records it, and made absolute there: a
journal another kernel sends later goes where its run was meant to go. MLflow's own retries apply to each call
(``MLFLOW_HTTP_REQUEST_MAX_RETRIES``); its credentials are its own (``MLFLOW_TRACKING_TOKEN``, or
``MLFLOW_TRACKING_USERNAME`` and ``MLFLOW_TRACKING_PASSWORD``).

**Exactly one run.** Each run carries its record's key as the tag ``jtd.key``. Before the run is created the sink
notes (saved) that it is about to be; a sink that finds that note without the run's id (the server made the run but
its answer was lost) looks the run up by its tag rather than make another. A run MLflow's own retry of the call made
twice (its first answer lost) is found by the same tag right after, and the spare one deleted. The id is saved
before anything else is logged to the run; its parameters are logged after, and again on a retry (MLflow takes a
parameter logged twice with the same value), so no retry ever skips them. A metric point sent again after an
outage is stored once by MLflow's database stores (they keep one of equal points).

**Records as MLflow's own.** MLflow's context tags (``mlflow.user``, the source, its git commit) come from its own
context providers when the run is recorded; NaN and infinite values are sent as they are (MLflow stores them).
"""
from __future__ import annotations

import hashlib
import os
from typing import Any, Final
from urllib.parse import urlparse

from ..core.errors import OptionsError
from .names import notebook_path, tracking_uri
from .sink import Down, Ledger, Refused, Rejected, Sink

__all__ = ["MlflowSink", "Down", "check_store", "CREDENTIALS"]

PARAM_CHARS: Final = 6000   # MLflow's limit on a parameter's value
METRICS_PER_CALL: Final = 1000
PARAMS_PER_CALL: Final = 100
KEY_TAG: Final = "jtd.key"
CREDENTIALS: Final = ("MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (MLflow sends "
                      "what they hold)")
_CREDENTIAL_VARS: Final = ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD",
                           "MLFLOW_TRACKING_AUTH", "MLFLOW_TRACKING_CLIENT_CERT_PATH",
                           "MLFLOW_TRACKING_SERVER_CERT_PATH", "MLFLOW_TRACKING_INSECURE_TLS", "DATABRICKS_TOKEN",
                           "DATABRICKS_HOST")
_DOWN: Final = {"INTERNAL_ERROR", "TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED", "RESOURCE_EXHAUSTED",
                "DEADLINE_EXCEEDED", "ABORTED", "CANCELLED", "IO_ERROR"}
_CREDENTIAL_CODES: Final = {"UNAUTHENTICATED", "CUSTOMER_UNAUTHORIZED", "PERMISSION_DENIED"}


def check_store(uri: str | None) -> None:
    """Before the run: a URI MLflow has no store for is refused now, and a local folder store
    (``MLFLOW_TRACKING_URI=./mlruns`` or ``file:...``) is asked (MLflow 3 refuses one unless
    ``MLFLOW_ALLOW_FILE_STORE=true``), so the run does not train for a record nobody takes. Servers and databases
    are not asked (a server that is down is waited for; the run goes on)."""
    if not uri or uri.startswith(("databricks", "uc")):
        return
    scheme = urlparse(uri).scheme
    if scheme not in ("", "file"):
        _check_scheme(uri)
        return
    from mlflow.tracking import MlflowClient

    try:
        MlflowClient(tracking_uri=uri)
    except Exception as exc:
        raise OptionsError(f"--track mlflow: MLflow does not take the tracking store {uri!r}: {exc}") from None


def _check_scheme(uri: str) -> None:
    try:
        from mlflow.tracking._tracking_service.utils import _tracking_store_registry as stores
    except ImportError:   # MLflow moved it: the first call says instead
        return
    try:
        stores.get_store_builder(uri)  # type: ignore[no-untyped-call]
    except Exception:
        raise OptionsError(f"--track mlflow: MLflow has no tracking store for {uri!r} (its schemes: http, https, "
                           "sqlite, postgresql, mysql, mssql, file, databricks): set MLFLOW_TRACKING_URI (or "
                           "mlflow.set_tracking_uri) to the tracking server's address, e.g. http://host:5000") from None


def _absolute(uri: str) -> str:
    """A relative folder or SQLite file made absolute here: the same store whichever kernel sends the record."""
    parsed = urlparse(uri)
    if parsed.scheme == "" or (parsed.scheme == "file" and not uri.startswith("file:/")):
        path = uri[len("file:"):] if parsed.scheme == "file" else uri
        return "file://" + os.path.abspath(os.path.expanduser(path))
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:////" + os.path.abspath(uri[len("sqlite:///"):]).lstrip("/")
    return uri


class MlflowSink(Sink):
    name = "mlflow"

    def __init__(self) -> None:
        self._clients: dict[str, Any] = {}
        self._experiments: dict[tuple[str, str], str] = {}
        self.created: dict[str, str] = {}   # record key -> MLflow run id made or found by this kernel

    # -- in the kernel that records the run ----------------------------------------------------------------------
    @classmethod
    def destination(cls, options: Any) -> dict[str, Any]:
        uri = tracking_uri()
        if uri is None:
            import mlflow   # its default store, as it resolves it here

            uri = str(mlflow.get_tracking_uri())
        return {"uri": _absolute(uri)}

    @classmethod
    def address(cls, settings: Any) -> str:
        return str(settings.get("uri") or "")

    @classmethod
    def preflight(cls, options: Any) -> None:
        check_store(tracking_uri())

    @classmethod
    def extras(cls) -> dict[str, Any]:
        """MLflow's own context tags (user, source, git commit), the source being the notebook when it is known."""
        from mlflow.tracking.context.registry import resolve_tags

        tags = {str(k): str(v) for k, v in resolve_tags({}).items()}
        path = notebook_path()
        for key in ("mlflow.source.name", "mlflow.source.type"):
            tags.pop(key, None)   # MLflow's guess in a kernel is the kernel's launcher
        if path:
            tags["mlflow.source.name"] = path
            tags["mlflow.source.type"] = "NOTEBOOK" if path.endswith(".ipynb") else "LOCAL"
            if "mlflow.source.git.commit" not in tags:
                tags.update(_git(path))
        return {"tags": tags}

    # -- in the kernel that sends the records ---------------------------------------------------------------------
    def credentials(self) -> str:
        seen = "\0".join(f"{k}={os.environ.get(k, '')}" for k in _CREDENTIAL_VARS)
        return hashlib.sha256(seen.encode()).hexdigest()

    def check(self, ledger: Ledger) -> None:
        """An HTTP server answers its health check within seconds, with this kernel's credentials, or the sink says
        why now (rather than after MLflow's minutes of retries)."""
        uri = self._uri(ledger)
        if not uri.startswith(("http://", "https://")):
            return
        from mlflow.utils.rest_utils import http_request

        try:
            store = self._client(uri)._tracking_client.store
            answer = http_request(store.get_host_creds(), "/health", "GET",  # type: ignore[no-untyped-call]
                                  max_retries=0, timeout=3, raise_on_status=False)
        except Exception as exc:
            raise Down(f"does not answer ({_reason(exc)})") from None
        status = int(answer.status_code)
        if status in (401, 403):
            raise _credentials(f"{status} {answer.reason}")
        if status >= 500 or status == 429:
            raise Down(f"does not answer ({status} {answer.reason})")
        # anything else (a 404 from a server without /health behind a path prefix): the calls themselves say

    def sort(self, exc: Exception) -> Exception:
        text = f"{type(exc).__name__}: {exc}"
        code = str(getattr(exc, "error_code", ""))
        if code in _CREDENTIAL_CODES:
            return _credentials(str(exc).splitlines()[0][:200])
        if code == "ENDPOINT_NOT_FOUND":
            return Refused(f"is not an MLflow tracking server (404 on its REST API: {str(exc)[:160]})",
                           "set MLFLOW_TRACKING_URI (or mlflow.set_tracking_uri) to the server's address, with its "
                           "path prefix if it has one")
        if isinstance(exc, ModuleNotFoundError):
            return Refused(f"needs {exc.name} in this kernel's environment", f"pip install {exc.name}")
        if code in _DOWN or "database is locked" in text or _unreachable(exc):
            return Down(f"does not answer ({_reason(exc)})")
        from mlflow.exceptions import MlflowException

        if isinstance(exc, MlflowException):
            return Rejected(str(exc).splitlines()[0][:300])
        return super().sort(exc)

    def begin(self, rec: dict[str, Any], ledger: Ledger) -> None:
        from mlflow.entities import Param

        client, key = self._client(self._uri(ledger)), rec["key"]
        ids: dict[str, str] = ledger.data.setdefault("ids", {})
        run_id = ids.get(key)
        if run_id is None:
            run_id = self._make(client, rec, ledger)
            ids[key] = run_id
            ledger.data["trying"] = [k for k in ledger.data.get("trying", []) if k != key]
            ledger.save()   # before anything is logged to it: a retry logs to this run, never to a second one
        self.created[key] = run_id
        ledger.made(key, run_id)
        params = [Param(str(k)[:250], str(v)[:PARAM_CHARS]) for k, v in (rec.get("params") or {}).items()]
        for i in range(0, len(params), PARAMS_PER_CALL):
            client.log_batch(run_id, params=params[i:i + PARAMS_PER_CALL])

    def _make(self, client: Any, rec: dict[str, Any], ledger: Ledger) -> str:
        """The run of ``rec``: the one an earlier try made (found by its key), else a new one."""
        key, ids = rec["key"], ledger.data["ids"]
        experiment = self._experiment(client, self._uri(ledger), rec["experiment"])
        trying: list[str] = ledger.data.setdefault("trying", [])
        if key in trying:
            found = _find(client, experiment, key)
            if found is not None:
                return found
        else:
            trying.append(key)
            ledger.save()
        tags = {str(k): str(v)[:5000] for k, v in (rec.get("tags") or {}).items()}
        tags.update({str(k): str(v)[:5000] for k, v in
                     ((rec.get("for") or {}).get(self.name, {}).get("tags") or {}).items()})
        tags[KEY_TAG] = key
        parent = rec.get("parent")
        if parent and parent in ids:
            tags["mlflow.parentRunId"] = ids[parent]
        run_id = str(client.create_run(experiment, start_time=int(rec["at"]), tags=tags,
                                       run_name=rec.get("name")).info.run_id)
        for other in _found(client, experiment, key):
            if other != run_id:   # MLflow's own retry of the call made the run twice (its first answer was lost)
                client.delete_run(other)
        return run_id

    def points(self, key: str, points: list[list[Any]], ledger: Ledger) -> None:
        run_id = ledger.data.get("ids", {}).get(key)
        if run_id is None or not points:
            return   # its run record was refused (said then)
        from mlflow.entities import Metric

        metrics = [Metric(str(name)[:250], float(value), int(ms), int(step)) for name, value, step, ms in points]
        client = self._client(self._uri(ledger))
        for i in range(0, len(metrics), METRICS_PER_CALL):
            client.log_batch(run_id, metrics=metrics[i:i + METRICS_PER_CALL])

    def end(self, rec: dict[str, Any], ledger: Ledger) -> None:
        ids = ledger.data.get("ids", {})
        run_id = ids.get(rec["key"])
        if run_id is None:
            return
        from mlflow.entities import RunTag

        client = self._client(self._uri(ledger))
        self.points(rec["key"], rec.get("pts") or [], ledger)
        tags = {str(k): str(v)[:5000] for k, v in (rec.get("tags") or {}).items()}
        best = rec.get("best")
        if best and best in ids:
            tags["jtd.best_run_id"] = ids[best]   # a sweep's parent names its best child run
        if tags:
            client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        self.files(rec, ledger, lambda path, folder: client.log_artifact(run_id, path, folder or None))
        client.set_terminated(run_id, rec.get("status") or "FINISHED", end_time=int(rec["at"]))

    # -- its clients ----------------------------------------------------------------------------------------------
    def _uri(self, ledger: Ledger) -> str:
        """The run's tracking URI; a journal an earlier version left without one goes to MLflow's store as this
        kernel sees it."""
        return str(ledger.settings.get("uri") or self.destination(None)["uri"])

    def _client(self, uri: str) -> Any:
        if uri not in self._clients:
            from mlflow.tracking import MlflowClient

            try:
                client = MlflowClient(tracking_uri=uri)
            except Exception as exc:
                raise Refused(f"is not a tracking store MLflow takes ({type(exc).__name__}: {str(exc)[:200]})",
                              "set MLFLOW_TRACKING_URI (or mlflow.set_tracking_uri) to the tracking server's "
                              "address, e.g. http://host:5000") from None
            service = getattr(client, "_tracking_client", None)
            if service is not None and hasattr(service, "_log_url"):
                # MLflow prints a run's link to stdout as it ends; from this thread it would land in whichever cell
                # runs then. This client's only: the notebook's own MLflow calls print as they always do.
                service._log_url = lambda run_id: None
            self._clients[uri] = client
        return self._clients[uri]

    def _experiment(self, client: Any, uri: str, name: str) -> str:
        if (uri, name) not in self._experiments:
            self._experiments[(uri, name)] = _experiment(client, name)
        return self._experiments[(uri, name)]


def _credentials(why: str) -> Refused:
    return Refused(f"refuses this kernel's credentials ({why})",
                   f"set {CREDENTIALS} in the kernel's environment (os.environ in the notebook will do), for a user "
                   "allowed to write to the experiment")


def _found(client: Any, experiment: str, key: str) -> list[str]:
    """The runs made for ``key`` (its ``jtd.key`` tag), oldest first."""
    found = client.search_runs([experiment], filter_string=f"tags.`{KEY_TAG}` = '{key}'", max_results=20,
                               order_by=["attributes.start_time ASC"])
    return [str(r.info.run_id) for r in found]


def _find(client: Any, experiment: str, key: str) -> str | None:
    """The run an earlier try made for ``key``, if the server made it (made twice by MLflow's own retries: the
    first, the others deleted)."""
    found = _found(client, experiment, key)
    for other in found[1:]:
        client.delete_run(other)
    return found[0] if found else None


def _git(path: str) -> dict[str, str]:
    """The notebook's folder's git commit, repository and branch, as MLflow's own git context names them."""
    from mlflow.utils.git_utils import get_git_branch, get_git_commit, get_git_repo_url

    folder = os.path.dirname(os.path.abspath(path)) if os.path.exists(path) else os.getcwd()
    found = {"mlflow.source.git.commit": get_git_commit(folder), "mlflow.source.git.repoURL": get_git_repo_url(folder),
             "mlflow.source.git.branch": get_git_branch(folder)}
    return {k: str(v) for k, v in found.items() if v}


def _experiment(client: Any, name: str) -> str:
    found = client.get_experiment_by_name(name)
    if found is not None:
        if getattr(found, "lifecycle_stage", "active") == "deleted":
            client.restore_experiment(found.experiment_id)
        return str(found.experiment_id)
    try:
        return str(client.create_experiment(name))
    except Exception:
        found = client.get_experiment_by_name(name)   # another notebook made it meanwhile
        if found is None:
            raise
        return str(found.experiment_id)


def _reason(exc: BaseException) -> str:
    """Why a call failed, in a few words: MLflow wraps the connection's error in a long line."""
    text = str(exc)
    for marker, said in (("Connection refused", "connection refused"), ("timed out", "timed out"),
                         ("Timeout", "timed out"), ("RemoteDisconnected", "connection closed"),
                         ("Connection aborted", "connection closed"), ("Name or service not known", "unknown host"),
                         ("database is locked", "database is locked")):
        if marker in text:
            return said
    return (text.splitlines() or [type(exc).__name__])[0][:200]


def _unreachable(exc: BaseException) -> bool:
    """MLflow's own error for a server that did not answer (after its retries), or the connection's."""
    if isinstance(exc, (PermissionError, FileNotFoundError)):
        return False
    text = f"{type(exc).__name__}: {exc}"
    return isinstance(exc, OSError) or any(
        word in text for word in ("Max retries exceeded", "Connection refused", "ConnectionError", "timed out",
                                  "Failed to establish", "RemoteDisconnected", "failed with exception"))
