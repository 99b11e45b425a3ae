"""Records a user can trust when things fail, with a real ``mlflow server`` (SQLite store) on loopback and real
ranks: a server gone for good (an earlier kernel's records for it, in the same cache folder) never delays a live
server's records; a server that goes away right after a run is made, for longer than MLflow's own retries, and a
parameters call that fails, leave exactly one run with its parameters and its whole history; a proxy that asks for
credentials is said within seconds, naming the tracker and what to set, and the records go once they are set; NaN
and infinities kept as MLflow stores them, MLflow's own context tags on the run."""
from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import time

import cloudpickle
import pytest

import jupyter_torchdist as jt
from jupyter_torchdist.tracking import shipper as shipping
from jupyter_torchdist.tracking.journal import journal_ids, spool_dir
from jupyter_torchdist.tracking.outbox import waiting

from ..support import needs
from ..support.http_proxy import HttpProxy
from ..support.mlflow_server import tracking_server

pytestmark = needs("mlflow", "tensorboard")
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the ranks cannot import the tests package

STEPS = 20


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # MLflow's own retries: one, a second apart; the outages below last longer than that
    with tracking_server(tmp_path_factory.mktemp("mlflow"), MLFLOW_HTTP_REQUEST_MAX_RETRIES="1",
                         MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR="1", MLFLOW_HTTP_REQUEST_TIMEOUT="5",
                         MLFLOW_TRACKING_TOKEN=None) as srv:
        yield srv


def _client(uri: str | None = None):
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def _runs(experiment: str, uri: str | None = None):
    c = _client(uri)
    exp = c.get_experiment_by_name(experiment)
    return [] if exp is None else c.search_runs([exp.experiment_id])


def steps(n: int = STEPS, odd: bool = False) -> list[float]:
    """Rank 0 reports a falling loss every step (``odd``: NaN at step 1, infinity at step 2, as a diverging run
    would); the ranks meet at a barrier each step."""
    import torch.distributed as dist

    import jupyter_torchdist as jt

    losses = []
    for step in range(n):
        loss = 1.0 / (step + 1)
        if odd and step in (1, 2):
            loss = float("nan") if step == 1 else float("inf")
        dist.barrier()
        jt.report(step=step, loss=loss)
        losses.append(loss)
    return losses


def _history(run_id: str, uri: str | None = None) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in _client(uri).get_metric_history(run_id, "loss"))


def test_a_server_gone_for_good_never_delays_a_live_ones_records(server, tmp_path):
    silent = socket.socket()   # a server that takes connections and never answers (a machine switched off
    silent.bind(("127.0.0.1", 0))  # behind a load balancer): every call to it waits for its timeout
    silent.listen(64)
    dead = f"http://127.0.0.1:{silent.getsockname()[1]}"
    # an earlier kernel, the same cache folder, its run tracked to that server; it ended with its records unsent
    left = (f"import sys; sys.path[:0] = {sys.path!r}\n"
            "from jupyter_torchdist.tracking.journal import Journal\n"
            f"j = Journal(('mlflow',), {dead!r}, to={{'mlflow': {{'uri': {dead!r}}}}})\n"
            "j.append({'k': 'run', 'key': 'run-earlier', 'experiment': 'gone', 'name': 'x', 'params': {}, 'at': 0})\n"
            "for s in range(20): j.append({'k': 'm', 'key': 'run-earlier', 'pts': [['loss', 1.0, s, 0]]})\n"
            "j.close()\n")
    subprocess.run([sys.executable, "-c", left], check=True, env=dict(os.environ))
    [earlier] = journal_ids(spool_dir())
    try:
        shipping.shipper().wake()   # this kernel takes the earlier one's journal over
        run = jt.run(steps, n=2, local=True, background=True, track="mlflow", experiment="apart")
        losses = run.result(timeout=120)
        assert jt.flush_tracking(60), "the live server's records waited for the dead one's"
        [record] = _runs("apart")
        assert _history(record.info.run_id) == [(s, pytest.approx(v)) for s, v in enumerate(losses)]
        assert run.tracking == {"mlflow": record.info.run_id} and run.mlflow_run_id == record.info.run_id
        assert earlier in journal_ids(spool_dir())   # still kept for its own server
        deadline = time.monotonic() + 60   # its own lane says it is down once its check has timed out
        while not (entries := waiting(spool_dir()))[0].status and time.monotonic() < deadline:
            time.sleep(0.5)
        [entry] = entries
        assert (entry.tracker, entry.address, (entry.status or {}).get("state")) == ("mlflow", dead, "down")
    finally:
        silent.close()
        from jupyter_torchdist.tracking.cli import main as tracking

        assert tracking(["drop", dead]) == 0   # this kernel's shipper holds it: it drops it


def test_a_server_gone_right_after_the_run_is_made_leaves_one_run_with_its_parameters_and_history(
        server, tmp_path, monkeypatch, capfd):
    proxy = HttpProxy(server.uri)
    made = proxy.vanish_after("/runs/create", 6.0)   # MLflow's own retries give up after about a second
    params_cut = proxy.cut("/runs/log-batch")        # and when it is back, the parameters' call fails once
    monkeypatch.setenv("MLFLOW_TRACKING_URI", proxy.uri)
    try:
        result = jt.run_detailed(steps, n=2, local=True, track="mlflow,tensorboard", experiment="once",
                                 logdir=str(tmp_path / "runs"))
        assert jt.flush_tracking(90)
    finally:
        proxy.stop()
    assert made.is_set() and params_cut.is_set()
    runs = _runs("once", server.uri)
    assert len(runs) == 1, [r.info.run_id for r in runs]   # the retry found the run the server made
    [record] = runs
    assert record.data.tags["jtd.key"] and record.data.params["n"] == "2" and record.data.params["local"] == "True"
    # exactly the history reported: every step once (MLflow keeps one of equal points sent twice)
    assert _history(record.info.run_id, server.uri) == [(s, pytest.approx(v)) for s, v in enumerate(result.value)]
    assert record.info.status == "FINISHED" and record.data.tags["jtd.state"] == "done"
    assert "does not answer" in capfd.readouterr().err


def test_credentials_refused_are_said_within_seconds_and_the_records_go_once_they_are_set(server, monkeypatch,
                                                                                        capfd):
    proxy = HttpProxy(server.uri)
    proxy.refuse_without("Bearer s3cret")   # a server behind a login
    monkeypatch.setenv("MLFLOW_TRACKING_URI", proxy.uri)
    try:
        losses = jt.run(steps, n=2, local=True, track="mlflow", experiment="guarded", odd=True)
        started = time.monotonic()
        assert jt.flush_tracking(120) is False
        assert time.monotonic() - started < 30   # said now, not after retrying for ever
        err = capfd.readouterr().err
        assert f"mlflow {proxy.uri} refuses this kernel's credentials (401 Unauthorized): set " \
               "MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD" in err, err
        [entry] = [e for e in waiting(spool_dir()) if e.address == proxy.uri]
        assert entry.status["state"] == "refused" and "MLFLOW_TRACKING_TOKEN" in entry.status["fix"]
        monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "s3cret")   # MLflow sends it as a bearer token
        assert jt.flush_tracking(60)
    finally:
        proxy.stop()
    [record] = _runs("guarded", server.uri)
    history = _history(record.info.run_id, server.uri)
    assert [s for s, _ in history] == list(range(STEPS)) and math.isnan(history[1][1])
    assert history[2][1] == sys.float_info.max   # +inf as MLflow's database stores keep it
    assert history[0][1] == losses[0]
    tags = record.data.tags   # MLflow's own context providers
    assert tags["mlflow.user"] and tags["mlflow.source.name"]
