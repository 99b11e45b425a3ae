"""Journal records to MLflow, through ``MlflowClient`` with explicit run ids: the notebook's own active run, if it
has one, is never touched. MLflow's own rules choose the server (``MLFLOW_TRACKING_URI``, ``mlflow.set_tracking_uri``
in the notebook, else its local default); its own retries apply to each call (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``).

A server that does not answer raises ``Down``: the shipper keeps the records and tries again later.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from ..core.errors import OptionsError

__all__ = ["MlflowSink", "Down", "check_store"]

PARAM_CHARS: Final = 6000   # MLflow's limit on a parameter's value
METRICS_PER_CALL: Final = 1000
PARAMS_PER_CALL: Final = 100


class Down(Exception):
    """The tracking server does not answer (the records stay in the journal)."""


def check_store(uri: str | None) -> None:
    """A local file store (``MLFLOW_TRACKING_URI=./mlruns`` or ``file:...``) is one MLflow itself may refuse (MLflow 3
    does unless ``MLFLOW_ALLOW_FILE_STORE=true``): ask it now, so the run does not train for a record nobody takes.
    Servers and databases are not asked (a server that is down is waited for; the run goes on)."""
    from urllib.parse import urlparse

    if not uri or uri.startswith(("databricks", "uc")) or urlparse(uri).scheme not in ("", "file"):
        return
    from mlflow.tracking import MlflowClient

    try:
        MlflowClient(tracking_uri=uri)
    except Exception as exc:
        raise OptionsError(f"--track mlflow: MLflow does not take the tracking store {uri!r}: {exc}") from None


class MlflowSink:
    name = "mlflow"

    def __init__(self) -> None:
        self._clients: dict[str | None, Any] = {}
        self.created: dict[str, str] = {}   # record key -> MLflow run id, for the kernel's Run handles

    def where(self, uri: str | None) -> str:
        if uri:
            return uri
        import mlflow

        return str(mlflow.get_tracking_uri())

    def check(self, uri: str | None) -> None:
        """An HTTP server answers its health check within seconds, or it is down (nothing else is tried)."""
        import urllib.error
        import urllib.request

        where = self.where(uri)
        if not where.startswith(("http://", "https://")):
            return
        try:
            with urllib.request.urlopen(where.rstrip("/") + "/health", timeout=3.0) as answer:
                answer.read()
        except OSError as exc:   # URLError is one
            raise Down(f"{where} does not answer ({getattr(exc, 'reason', exc)})") from None

    def apply(self, records: Sequence[dict[str, Any]], state: dict[str, Any]) -> None:
        """Send ``records`` (consecutive metric records for one run in one call); ``state["ids"]``: key -> run id."""
        ids: dict[str, str] = state.setdefault("ids", {})
        lead = records[0]
        client = self._client(state.get("uri"))
        try:
            if lead["k"] == "run":
                self._run(client, lead, ids)
            elif lead["k"] == "m":
                points = [p for r in records for p in r.get("pts", [])]
                self._metrics(client, ids.get(lead["key"]), points)
            elif lead["k"] == "end":
                self._end(client, lead, ids.get(lead["key"]))
        except Down:
            raise
        except Exception as exc:
            if _unreachable(exc):
                raise Down(f"{self.where(state.get('uri'))} does not answer ({type(exc).__name__})") from None
            raise

    def _client(self, uri: str | None) -> Any:
        if uri not in self._clients:
            from mlflow.tracking import MlflowClient

            client = MlflowClient(tracking_uri=uri)
            service = getattr(client, "_tracking_client", None)
            if service is not None and hasattr(service, "_log_url"):
                # MLflow prints a run's link to stdout as it ends; from this thread it would land in whichever cell
                # runs then. This client's only: the notebook's own MLflow calls print as they always do.
                service._log_url = lambda run_id: None
            self._clients[uri] = client
        return self._clients[uri]

    def _run(self, client: Any, rec: dict[str, Any], ids: dict[str, str]) -> None:
        if rec["key"] in ids:
            return
        from mlflow.entities import Param

        tags = {str(k): str(v) for k, v in (rec.get("tags") or {}).items()}
        parent = rec.get("parent")
        if parent and parent in ids:
            tags["mlflow.parentRunId"] = ids[parent]
        run = client.create_run(_experiment(client, rec["experiment"]), start_time=int(rec["at"]), tags=tags,
                                run_name=rec.get("name"))
        ids[rec["key"]] = self.created[rec["key"]] = run.info.run_id
        params = [Param(str(k)[:250], str(v)[:PARAM_CHARS]) for k, v in (rec.get("params") or {}).items()]
        for i in range(0, len(params), PARAMS_PER_CALL):
            client.log_batch(run.info.run_id, params=params[i:i + PARAMS_PER_CALL])

    def _metrics(self, client: Any, run_id: str | None, points: list[Any]) -> None:
        if run_id is None or not points:
            return
        from mlflow.entities import Metric

        metrics = [Metric(str(name)[:250], float(value), int(ms), int(step)) for name, value, step, ms in points]
        for i in range(0, len(metrics), METRICS_PER_CALL):
            client.log_batch(run_id, metrics=metrics[i:i + METRICS_PER_CALL])

    def _end(self, client: Any, rec: dict[str, Any], run_id: str | None) -> None:
        if run_id is None:
            return
        from mlflow.entities import RunTag

        self._metrics(client, run_id, rec.get("pts") or [])
        tags = [RunTag(str(k), str(v)[:5000]) for k, v in (rec.get("tags") or {}).items()]
        if tags:
            client.log_batch(run_id, tags=tags)
        for path, folder in rec.get("files") or []:
            try:
                client.log_artifact(run_id, path, folder or None)
            except FileNotFoundError:
                continue   # removed before it was sent: the rest of the record still goes
        client.set_terminated(run_id, rec.get("status") or "FINISHED", end_time=int(rec["at"]))


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


def _unreachable(exc: BaseException) -> bool:
    """MLflow's own error for a server that did not answer (after its retries), or the connection's."""
    text = f"{type(exc).__name__}: {exc}"
    return isinstance(exc, (ConnectionError, TimeoutError, OSError)) or any(
        word in text for word in ("Max retries exceeded", "Connection refused", "ConnectionError", "timed out",
                                  "Failed to establish", "RemoteDisconnected", "API request to"))
