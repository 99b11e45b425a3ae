"""What the trackers' records hold, with the trackers' own libraries and readers (no ranks, no server): every
tracker of the registry has its sink; where a run's records go is resolved when it is recorded (MLflow's store made
absolute in the recording kernel's folder, W&B's project and mode from its variables); MLflow's own context tags;
TensorBoard's HParams sessions, read back by TensorBoard's reader."""
from __future__ import annotations

import os

import pytest

from jupyter_torchdist.core.options import RunOptions
from jupyter_torchdist.core.trackers import REGISTRY
from jupyter_torchdist.tracking import sinks as registry
from jupyter_torchdist.tracking.sink import Ledger


def test_every_tracker_has_its_sink_and_only_one():
    for name in REGISTRY:
        assert registry.sink_class(name).name == name
    assert set(registry.new_sinks()) == set(REGISTRY)


def test_mlflows_store_is_resolved_where_the_run_is_recorded(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from jupyter_torchdist.tracking.mlflow_sink import MlflowSink

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "./mlruns")
    assert MlflowSink.destination(RunOptions()) == {"uri": f"file://{tmp_path}/mlruns"}
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///runs.db")
    assert MlflowSink.destination(RunOptions()) == {"uri": f"sqlite:///{tmp_path}/runs.db"}
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking:5000")
    assert MlflowSink.address(MlflowSink.destination(RunOptions())) == "http://tracking:5000"


def test_mlflows_own_context_tags_name_the_user_and_the_notebooks_commit(monkeypatch):
    pytest.importorskip("mlflow")
    from jupyter_torchdist.tracking.mlflow_sink import MlflowSink

    notebook = os.path.join(os.getcwd(), "docs", "examples", "mnist.ipynb")   # a path in this git checkout
    monkeypatch.setenv("JPY_SESSION_NAME", notebook)
    tags = MlflowSink.extras()["tags"]
    assert tags["mlflow.user"] and tags["mlflow.source.name"] == notebook
    assert tags["mlflow.source.type"] == "NOTEBOOK"
    if os.path.isdir(".git"):
        assert len(tags["mlflow.source.git.commit"]) == 40


def test_wandbs_project_comes_from_experiment_then_its_variable(monkeypatch, tmp_path):
    from jupyter_torchdist.tracking.wandb_sink import WandbSink, wandb_id

    monkeypatch.setenv("WANDB_PROJECT", "theirs")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.delenv("WANDB_ENTITY", raising=False)
    given = WandbSink.destination(RunOptions(track=("wandb",), experiment="mine"))
    assert given == {"project": "mine", "entity": None, "mode": "offline", "dir": str(tmp_path)}
    assert WandbSink.destination(RunOptions(track=("wandb",)))["project"] == "theirs"
    assert WandbSink.address(given) == "mine (offline)"
    assert wandb_id("run-0a1b2c3d4e5f") == "run0a1b2c3d4e5f"


def _ledger(data: dict) -> Ledger:
    return Ledger("runs", {}, data, lambda: None, lambda key, ref: None, print)


def test_tensorboard_gets_an_hparams_session_per_run_and_keeps_nan(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    from jupyter_torchdist.tracking.tb_sink import TensorBoardSink

    sink, data = TensorBoardSink(), {}
    for i, lr in enumerate((0.1, 0.01)):
        folder = str(tmp_path / f"m{i}")
        sink.apply([{"k": "run", "key": f"m{i}", "parent": "s", "params": {"lr": lr, "n": 2, "gpu": False},
                     "tags": {"jtd.kind": "member"}, "folder": folder, "at": 1_700_000_000_000}], _ledger(data))
        sink.apply([{"k": "m", "key": f"m{i}", "pts": [["loss", 1.0, 0, 0], ["loss", float("nan"), 1, 0]]}],
                   _ledger(data))
        sink.apply([{"k": "end", "key": f"m{i}", "status": "FINISHED", "tags": {"jtd.state": "done"}, "pts": [],
                     "files": [], "at": 1_700_000_001_000}], _ledger(data))
        events = EventAccumulator(folder)
        events.Reload()
        content = events.PluginTagToContent("hparams")
        assert content, "no hparams summaries"
        start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
        assert start.session_start_info.hparams["lr"].number_value == lr
        assert start.session_start_info.hparams["gpu"].bool_value is False
        end = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_end_info"])
        assert end.session_end_info.status == 1   # STATUS_SUCCESS
        values = [e.value for e in events.Scalars("loss")]
        assert values[0] == 1.0 and values[1] != values[1]   # NaN kept
