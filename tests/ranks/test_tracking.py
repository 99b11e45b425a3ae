"""Runs on record, with real components: a real ``mlflow server`` (SQLite store) on loopback, MLflow's file store,
TensorBoard's own event reader on the files written (scalars and HParams sessions), W&B in its offline mode read back
from its own run files, ``torch.profiler``'s trace loaded back; real ranks (local processes: the record is the
kernel's, the same on every backend). The server is also stopped mid-run: nothing may be lost."""
from __future__ import annotations

import gzip
import json
import sys
import time
from pathlib import Path

import cloudpickle
import pytest

import jupyter_torchdist as jt
from jupyter_torchdist.core.errors import OptionsError

from ..support import needs
from ..support.mlflow_server import tracking_server
from ..support.wandb_files import offline_runs
from .test_sweep_search import toy   # a loss lowest at lr = 0.1, steps long enough for the rule to judge

pytestmark = needs("mlflow", "tensorboard")
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the ranks cannot import the tests package

STEPS = 24


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # MLflow's own knobs: no retries, short timeouts, so a stopped server is seen in seconds, not minutes
    with tracking_server(tmp_path_factory.mktemp("mlflow"), MLFLOW_HTTP_REQUEST_MAX_RETRIES="0",
                         MLFLOW_HTTP_REQUEST_TIMEOUT="5") as srv:
        yield srv


def _client():
    from mlflow.tracking import MlflowClient

    return MlflowClient()


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    """W&B without a server: its offline mode, its files in the test's folder."""
    pytest.importorskip("wandb")
    folder = tmp_path / "wandb-dir"
    folder.mkdir()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(folder))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    return folder


def _hparams(folder: Path) -> dict[str, object]:
    """The HParams session TensorBoard's own reader finds in a run's folder: its parameters."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    events = EventAccumulator(str(folder))
    events.Reload()
    content = events.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    return {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind"))
            for k, v in start.session_start_info.hparams.items()}


def _runs(experiment: str):
    c = _client()
    exp = c.get_experiment_by_name(experiment)
    return [] if exp is None else c.search_runs([exp.experiment_id])


def train(steps: int = STEPS, slow_rank: int | None = 1, nap: float = 0.0) -> list[float]:
    """A small DDP loop over a DataLoader; ``slow_rank``'s data loader sleeps. Returns rank 0's losses."""
    import time

    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, Dataset

    import jupyter_torchdist as jt

    class Data(Dataset):
        def __len__(self) -> int:
            return 100_000

        def __getitem__(self, i: int):
            if jt.rank() == slow_rank:
                time.sleep(0.002)
            return torch.randn(32), torch.randn(1)

    torch.manual_seed(jt.rank())
    model = DDP(torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for step, (x, y) in enumerate(DataLoader(Data(), batch_size=16)):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        jt.report(step=step, total=steps, loss=loss.item(), lr=0.05)
        time.sleep(nap)
        if step + 1 == steps:
            return losses
    return losses


def test_a_tracked_profiled_run_is_one_mlflow_run_tensorboard_files_one_wandb_run_and_a_trace_per_rank(
        server, tmp_path, offline_wandb):
    result = jt.run_detailed(train, n=2, local=True, track="mlflow,tensorboard,wandb", experiment="tracked",
                             logdir=str(tmp_path / "runs"), profile="4:9")
    losses = result.value
    assert jt.flush_tracking(60)
    handle = jt.runs()[-1]
    [run] = _runs("tracked")   # one run, not one per rank
    c = _client()
    assert run.info.status == "FINISHED"
    assert run.data.params["n"] == "2" and run.data.params["local"] == "True"
    tags = run.data.tags
    assert (tags["jtd.state"], tags["jtd.ranks"], tags["jtd.backend"]) == ("done", "2", "local") and tags["jtd.hosts"]
    history = sorted((m.step, m.value) for m in c.get_metric_history(run.info.run_id, "loss"))
    assert history == [(step, pytest.approx(loss)) for step, loss in enumerate(losses)]   # every step, as reported
    assert run.data.metrics["jtd.step_rate_median"] > 0 and "jtd.step_rate_slowest" in run.data.metrics
    report = Path(c.download_artifacts(run.info.run_id, "report.html", str(tmp_path)))
    assert "run(train) -n 2" in report.read_text() and "succeeded" in report.read_text()
    assert sorted(a.path for a in c.list_artifacts(run.info.run_id, "profile")) == [
        "profile/rank-0.pt.trace.json.gz", "profile/rank-1.pt.trace.json.gz"]
    assert run.data.tags["mlflow.user"] and run.data.tags["jtd.key"] == handle.record_key   # MLflow's own context

    # TensorBoard's own reader on the run's folder
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    [folder] = (tmp_path / "runs").iterdir()
    events = EventAccumulator(str(folder))
    events.Reload()
    assert [e.step for e in events.Scalars("loss")] == list(range(STEPS))
    assert [e.value for e in events.Scalars("loss")] == pytest.approx(losses, rel=1e-6)
    assert _hparams(folder)["n"] == 2 and _hparams(folder)["local"] is True   # in TensorBoard's HParams dashboard

    # W&B's own run files: one run, written by the kernel (not one per rank)
    [wb] = offline_runs(offline_wandb).values()
    assert handle.tracking == {"mlflow": run.info.run_id, "tensorboard": str(folder), "wandb": wb.folder}
    assert (wb.project, wb.job_type, wb.config["n"], wb.config["local"]) == ("tracked", "run", 2, True)
    history = [(h["_step"], h["loss"]) for h in wb.history if "loss" in h]
    assert history == [(step, pytest.approx(loss)) for step, loss in enumerate(losses)]
    assert wb.summary["jtd.state"] == "done" and wb.exit_code == 0
    [report] = wb.artifacts
    assert report["type"] == "run-report" and {"report.html", "source.py", "value.txt",
                                               "profile/rank-1.pt.trace.json.gz"} <= set(report["files"])

    # the profile: the rank whose data loader sleeps is named; each trace is torch.profiler's own, loaded back
    profile = result.state.snapshot()["profile"]
    assert profile["verdict"].startswith("rank 1 is the slowest") and "waiting for input" in profile["verdict"]
    rows = {r["rank"]: r for r in profile["ranks"]}
    assert rows[1]["input"] > 0.5 and rows[0]["comm"] > rows[1]["comm"]
    assert (rows[0]["first"], rows[0]["last"], rows[0]["steps"]) == (4, 8, 5)
    trace = json.loads(gzip.decompress(Path(rows[1]["trace"]).read_bytes()))
    names = {e.get("name", "") for e in trace["traceEvents"]}
    assert any(n.startswith("ProfilerStep#") for n in names)
    assert any(n.startswith("enumerate(DataLoader)") for n in names)


def test_a_server_stopped_mid_run_loses_nothing(server, tmp_path, capfd):
    run = jt.run(train, n=2, local=True, background=True, track="mlflow", experiment="outage", steps=40,
                 slow_rank=None, nap=0.1)
    deadline = time.time() + 60
    while not _runs("outage") and time.time() < deadline:   # its record began on the server
        time.sleep(0.2)
    assert _runs("outage"), "the run's record never reached the server"
    server.stop()
    losses = run.result(timeout=120)   # the run trains to its end with the server down
    assert run.state == "done"
    assert not jt.flush_tracking(1)
    err = capfd.readouterr().err
    assert err.count("does not answer") == 1, err
    server.start()
    assert jt.flush_tracking(90)
    [record] = _runs("outage")
    # at least once: a call the server took as it went down is sent again, so a point may come twice
    history = sorted({(m.step, m.value) for m in _client().get_metric_history(record.info.run_id, "loss")})
    assert history == [(step, pytest.approx(loss)) for step, loss in enumerate(losses)]
    assert record.info.status == "FINISHED" and record.data.tags["jtd.state"] == "done"
    assert run.mlflow_run_id == record.info.run_id   # the handle names its record


def test_a_sweep_is_a_parent_run_with_a_child_per_member_in_mlflow_tensorboards_hparams_and_a_wandb_group(
        server, tmp_path, offline_wandb):
    lrs = [0.1, 10.0, 1e-4, 1.0]
    s = jt.sweep(toy, {"lr": lrs}, str(tmp_path), n=2, local=True, concurrent=2, early_stop="asha", grace=2,
                 track="mlflow,tensorboard,wandb", experiment="swept", logdir=str(tmp_path / "runs"))
    assert s.wait(180)
    assert jt.flush_tracking(60)
    runs = _runs("swept")
    [parent] = [r for r in runs if r.data.tags.get("jtd.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(float(r.data.params["lr"]) for r in children) == sorted(lrs)
    states = {float(r.data.params["lr"]): r.data.tags["jtd.state"] for r in children}
    assert states == {float(m.params["lr"]): m.state for m in s.runs}   # as the members' handles say
    early = {lr for lr, state in states.items() if state not in ("done", "failed", "stopped")}   # its rule's
    assert states[0.1] == "done" and early, states
    for r in children:
        assert (r.data.tags.get("jtd.pruned") == "true") == (float(r.data.params["lr"]) in early)
    assert parent.info.status == "FINISHED" and parent.data.tags["jtd.best"] == "lr=0.1"
    assert parent.data.metrics["best_loss"] == pytest.approx(s.best().result())
    assert s.mlflow_run_id == parent.info.run_id
    assert sorted(r.mlflow_run_id for r in s.runs) == sorted(r.info.run_id for r in children)
    [best] = [r for r in children if float(r.data.params["lr"]) == 0.1]
    assert parent.data.tags["jtd.best_run_id"] == best.info.run_id
    assert parent.data.tags["jtd.best_metric"] == "best_loss"

    # TensorBoard's HParams dashboard: a session per member, its lr among its parameters
    [sweep_folder] = (tmp_path / "runs").iterdir()
    members = sorted(p for p in sweep_folder.iterdir() if p.is_dir())
    assert sorted(_hparams(p)["lr"] for p in members) == pytest.approx(sorted(lrs))

    # W&B: the members and the parent in one group, the parent's summary naming the best member
    wb = offline_runs(offline_wandb)
    [top] = [r for r in wb.values() if r.job_type == "sweep"]
    assert len(wb) == len(lrs) + 1 and {r.group for r in wb.values()} == {top.group}
    assert sorted(r.config["lr"] for r in wb.values() if r.job_type == "member") == sorted(lrs)
    assert wb[top.summary["jtd.best_run_id"]].config["lr"] == 0.1
    assert top.summary["best_loss"] == pytest.approx(s.best().result()) and s.tracking["wandb"] == top.folder


def test_mlflows_file_store_is_asked_before_the_run_and_takes_the_record_when_mlflow_allows_it(server, tmp_path,
                                                                                              monkeypatch):
    from mlflow.tracking import MlflowClient

    store = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    before = len(jt.runs())
    with pytest.raises(OptionsError, match="MLFLOW_ALLOW_FILE_STORE"):   # MLflow 3 refuses it unless allowed
        jt.run(train, n=2, local=True, track="mlflow", experiment="filed", steps=6, slow_rank=None)
    assert len(jt.runs()) == before   # refused before any rank started
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    run = jt.run(train, n=2, local=True, background=True, track="mlflow", experiment="filed", steps=6,
                 slow_rank=None)
    losses = run.result(timeout=120)
    assert jt.flush_tracking(60)
    client = MlflowClient(store)
    [record] = client.search_runs([client.get_experiment_by_name("filed").experiment_id])
    assert record.info.run_id == run.mlflow_run_id and record.info.status == "FINISHED"
    history = sorted((m.step, m.value) for m in client.get_metric_history(record.info.run_id, "loss"))
    assert history == [(step, pytest.approx(loss)) for step, loss in enumerate(losses)]
    assert {"report.html", "source.py", "value.txt"} <= {a.path for a in client.list_artifacts(record.info.run_id)}
    source = Path(client.download_artifacts(record.info.run_id, "source.py", str(tmp_path))).read_text()
    assert source.startswith("def train(")   # run(fn): the function's own source


def all_reducing(steps: int = 16, floats: int = 12_000_000) -> None:
    """Every step a large all-reduce (48 MB) beside a little compute: what a big model's gradients cost on gloo."""
    import torch
    import torch.distributed as dist

    import jupyter_torchdist as jt

    grads = torch.zeros(floats)
    for step in range(steps):
        torch.randn(64, 64) @ torch.randn(64, 64)
        dist.all_reduce(grads)
        jt.report(step=step, total=steps)


def test_ranks_slowed_by_a_large_all_reduce_are_named_as_communicating(tmp_path):
    # ten steps of a few tens of ms each: longer than a hiccup of the machine's, so the shares are the loop's
    result = jt.run_detailed(all_reducing, n=2, local=True, profile="3:13", logdir=str(tmp_path / "runs"))
    profile = result.state.snapshot()["profile"]
    assert "communicating (all-reduce and other collectives); every rank " in profile["verdict"], profile
    assert "in collectives: the collectives themselves take the time" in profile["verdict"], profile
    for row in profile["ranks"]:
        assert row["comm"] > 0.5 and row["comm"] > row["compute"] + row["input"], row


def lightning_cell(steps: int = 5) -> str:
    """Lightning's own MLflow logger, called on every rank as a LightningModule's self.log would."""
    import os

    from lightning.pytorch.loggers import MLFlowLogger

    import jupyter_torchdist as jt

    logger = MLFlowLogger(experiment_name="lightning", tracking_uri=os.environ["MLFLOW_TRACKING_URI"])
    for step in range(steps):
        logger.log_metrics({"own_loss": 1.0 / (step + 1)}, step=step)
        jt.report(step=step, loss=1.0 / (step + 1))
    logger.finalize("success")
    return logger.run_id


def test_lightnings_own_mlflow_logger_keeps_working_and_adds_no_run_per_rank(server):
    pytest.importorskip("lightning")
    theirs = jt.run(lightning_cell, n=2, local=True, track="mlflow", experiment="lightning")
    assert jt.flush_tracking(60)
    runs = {r.info.run_id: r for r in _runs("lightning")}
    assert len(runs) == 2, [r.info.run_name for r in runs.values()]   # ours and Lightning's: not one per rank
    assert "own_loss" in runs[theirs].data.metrics
    [ours] = [r for r in runs.values() if r.info.run_id != theirs]
    assert ours.data.tags["jtd.kind"] == "run" and "loss" in ours.data.metrics


def transformers_cell(steps: int = 4) -> str:
    """A Hugging Face Trainer reporting to MLflow with its own callback (``report_to=["mlflow"]``), on every rank."""
    import os
    import tempfile

    import mlflow
    import torch
    from transformers import Trainer, TrainingArguments

    class Regression(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def forward(self, x, labels=None):
            return {"loss": torch.nn.functional.mse_loss(self.net(x), labels)}

    class Points(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int):
            x = torch.randn(8, generator=torch.Generator().manual_seed(i))
            return {"x": x, "labels": x.sum(0, keepdim=True)}

    os.environ["MLFLOW_EXPERIMENT_NAME"] = "transformers"
    args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=8, max_steps=steps,
                             logging_steps=1, report_to=["mlflow"], save_strategy="no", use_cpu=True)
    Trainer(model=Regression(), args=args, train_dataset=Points()).train()
    last = mlflow.last_active_run()   # the Trainer's, on the rank that logged (world process zero)
    return last.info.run_id if last is not None else ""


def test_transformers_own_mlflow_callback_keeps_working_and_adds_no_run_per_rank(server):
    pytest.importorskip("transformers")
    theirs = jt.run_detailed(transformers_cell, n=2, local=True, track="mlflow", experiment="transformers",
                             all_ranks=True)
    trainers, others = theirs.value   # rank 0's run id (the Trainer's), and rank 1's
    assert jt.flush_tracking(60)
    runs = {r.info.run_id: r for r in _runs("transformers")}
    assert len(runs) == 2, [r.info.run_name for r in runs.values()]   # ours and the Trainer's: not one per rank
    assert others == ""   # the other rank made no run
    trainer_run = runs[trainers]
    assert "loss" in trainer_run.data.metrics and "jtd.kind" not in trainer_run.data.tags
    [ours] = [r for r in runs.values() if r.info.run_id != trainers]
    assert ours.data.tags["jtd.kind"] == "run" and ours.data.tags["jtd.state"] == "done"
