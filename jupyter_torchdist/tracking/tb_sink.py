"""Journal records to TensorBoard's scalar event files, written by its own writer (``torch.utils.tensorboard``,
which needs the ``tensorboard`` package), a folder per run: ``%tensorboard --logdir runs`` compares them, a sweep's
members side by side under the sweep's folder. Local files: this sink is never down."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["TensorBoardSink"]


class TensorBoardSink:
    name = "tensorboard"

    def __init__(self) -> None:
        self._writers: dict[str, Any] = {}

    def check(self, uri: str | None) -> None:
        return None

    def apply(self, records: Sequence[dict[str, Any]], state: dict[str, Any]) -> None:
        folders: dict[str, str] = state.setdefault("folders", {})
        for rec in records:
            key = rec.get("key", "")
            if rec["k"] == "run" and rec.get("folder"):
                folders[key] = rec["folder"]
            writer = self._writer(folders.get(key))
            if writer is None:
                continue
            for name, value, step, ms in rec.get("pts") or []:
                writer.add_scalar(str(name), float(value), int(step), walltime=ms / 1000.0)
            if rec["k"] == "run" and rec.get("params"):
                text = "\n".join(f"| {k} | {v} |" for k, v in rec["params"].items())
                writer.add_text("parameters", "| name | value |\n|---|---|\n" + text, 0)
            if rec["k"] == "end":
                writer.close()
                self._writers.pop(folders.get(key) or "", None)
            else:
                writer.flush()

    def _writer(self, folder: str | None) -> Any:
        if not folder:
            return None
        if folder not in self._writers:
            from torch.utils.tensorboard import SummaryWriter

            self._writers[folder] = SummaryWriter(log_dir=folder)
        return self._writers[folder]
