"""TensorBoard's sink: a run's records become event files written by TensorBoard's own writer
(``torch.utils.tensorboard``, which needs the ``tensorboard`` package), a folder per run: ``%tensorboard --logdir
runs`` compares them, a sweep's members side by side under the sweep's folder.

Each run's folder holds its scalars (every point rank 0 reported, NaN and infinities as they were), its parameters
as an HParams session (TensorBoard's ``session_start_info``, with the run's end as ``session_end_info``), so the
HParams dashboard lists every run and sweep member with its values and metrics, and as a text table. No experiment
summary is written: the dashboard then builds one from every session under the log folder, whatever its runs' keys.
Local files: this sink is never down, but a folder this kernel may not write is said (``Refused``).
"""
from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from ..core.track_options import DEFAULT_LOGDIR
from .sink import Ledger, Sink

__all__ = ["TensorBoardSink"]

_STATUS = {"FINISHED": "STATUS_SUCCESS", "FAILED": "STATUS_FAILURE", "KILLED": "STATUS_FAILURE"}


class TensorBoardSink(Sink):
    name = "tensorboard"

    def __init__(self) -> None:
        self._writers: dict[str, Any] = {}

    @classmethod
    def destination(cls, options: Any) -> dict[str, Any]:
        return {"logdir": os.path.abspath(os.path.expanduser(options.logdir or DEFAULT_LOGDIR))}

    @classmethod
    def address(cls, settings: Mapping[str, Any]) -> str:
        return str(settings.get("logdir") or "")

    def begin(self, rec: dict[str, Any], ledger: Ledger) -> None:
        folders: dict[str, str] = ledger.data.setdefault("folders", {})
        if not rec.get("folder"):
            return
        folders[rec["key"]] = rec["folder"]
        ledger.made(rec["key"], rec["folder"])
        writer = self._writer(rec["folder"])
        params = rec.get("params") or {}
        if params:
            text = "\n".join(f"| {k} | {v} |" for k, v in params.items())
            writer.add_text("parameters", "| name | value |\n|---|---|\n" + text, 0)
            if rec.get("parent") or (rec.get("tags") or {}).get("jtd.kind") != "sweep":
                _session_start(writer, params, rec)
        writer.flush()

    def points(self, key: str, points: list[list[Any]], ledger: Ledger) -> None:
        writer = self._writer(ledger.data.get("folders", {}).get(key))
        if writer is None:
            return
        for name, value, step, ms in points:
            writer.add_scalar(str(name), float(value), int(step), walltime=ms / 1000.0)
        writer.flush()

    def end(self, rec: dict[str, Any], ledger: Ledger) -> None:
        folder = ledger.data.get("folders", {}).get(rec["key"])
        writer = self._writer(folder)
        if writer is None:
            return
        self.points(rec["key"], rec.get("pts") or [], ledger)
        if (rec.get("tags") or {}).get("jtd.state") is not None:
            _session_end(writer, str(rec.get("status") or "FINISHED"), rec)
        writer.close()
        self._writers.pop(folder or "", None)

    def _writer(self, folder: str | None) -> Any:
        if not folder:
            return None
        if folder not in self._writers:
            from torch.utils.tensorboard import SummaryWriter

            self._writers[folder] = SummaryWriter(log_dir=folder)
        return self._writers[folder]


def _hparam(value: Any) -> bool | int | float | str:
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _summary(tag: str, **info: Any) -> Any:
    """A summary the HParams plugin reads (its plugin data alone, as TensorBoard's own ``hparams`` summaries are;
    built from its protos: TensorBoard's summary helpers need TensorFlow)."""
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.plugins.hparams.metadata import PLUGIN_DATA_VERSION, PLUGIN_NAME
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    content = HParamsPluginData(version=PLUGIN_DATA_VERSION, **info).SerializeToString()
    meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name=PLUGIN_NAME, content=content))
    return Summary(value=[Summary.Value(tag=tag, metadata=meta)])


def _session_start(writer: Any, params: Mapping[str, Any], rec: dict[str, Any]) -> None:
    """The run as an HParams session: its parameters, when it began."""
    from tensorboard.plugins.hparams.metadata import SESSION_START_INFO_TAG
    from tensorboard.plugins.hparams.plugin_data_pb2 import SessionStartInfo

    began = rec.get("at", time.time() * 1000) / 1000.0
    start = SessionStartInfo(start_time_secs=began)
    for key, value in params.items():
        if value is None:
            continue
        value = _hparam(value)
        if isinstance(value, bool):
            start.hparams[str(key)].bool_value = value
        elif isinstance(value, (int, float)):
            start.hparams[str(key)].number_value = float(value)
        else:
            start.hparams[str(key)].string_value = value
    writer.file_writer.add_summary(_summary(SESSION_START_INFO_TAG, session_start_info=start), 0, began)


def _session_end(writer: Any, status: str, rec: dict[str, Any]) -> None:
    from tensorboard.plugins.hparams.api_pb2 import Status
    from tensorboard.plugins.hparams.metadata import SESSION_END_INFO_TAG
    from tensorboard.plugins.hparams.plugin_data_pb2 import SessionEndInfo

    ended = rec.get("at", time.time() * 1000) / 1000.0
    end = SessionEndInfo(status=Status.Value(_STATUS.get(status, "STATUS_UNKNOWN")), end_time_secs=ended)
    writer.file_writer.add_summary(_summary(SESSION_END_INFO_TAG, session_end_info=end), 0, ended)
