"""The reports the panel opens: a run's snapshot (or a sweep's), written by the kernel to its reports folder.

An ended run's report is written once, as it ends: the snapshot its cell's report shows (``views.trim``'s report
budget), so the panel's tab and the notebook's cell draw the same report. A running run's is written when the panel
asks (``asks.py``), at most once a second while the panel's tab keeps asking. Reports of runs no longer listed are
removed. The file: ``{"mime": <the MIME type the labextension renders>, "data": <snapshot>, "at": <time>}``.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from ..views.report import MIME_TYPE
from ..views.trim import trim_snapshot
from ..core.held_folder import Held

__all__ = ["Reports", "RUN_MIME", "SWEEP_MIME", "report_name"]

RUN_MIME: Final = MIME_TYPE
SWEEP_MIME: Final = "application/vnd.jupyter-torchdist.sweep+json"
LIVE_EVERY_S: Final = 1.0


def report_name(target: str) -> str:
    """A run's (or sweep's) durable id -> its report's file, ``<id>.json``."""
    return f"{target}.json"


class Reports:
    """The kernel's reports folder, held open (``folder.Held``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with Held(path.parent) as registry:
            self.held = registry.sub(path.name, create=True)
        for name in self.held.names():   # a restarted kernel keeps its id: its previous process's reports
            self.held.remove(name)       # would pass for the new runs of the same numbers
        self._written: dict[str, float] = {}   # target -> when its report was last written
        self._final: set[str] = set()          # targets whose last report is written

    def where(self, target: str) -> str | None:
        """The report's file, once there is one."""
        return str(self.path / report_name(target)) if target in self._written else None

    def final(self, target: str) -> bool:
        """The ended run's report is written (or it has none: it ended before its first frame)."""
        return target in self._final

    def run_ended(self, target: str, frame: Mapping[str, Any] | None) -> None:
        if target not in self._final:
            if frame is not None:
                self._write(target, RUN_MIME, dict(trim_snapshot(frame)))
            self._final.add(target)

    def sweep_ended(self, target: str, sweep: Any) -> None:
        if target not in self._final:
            self._write(target, SWEEP_MIME, sweep.snapshot())
            self._final.add(target)

    def wanted(self, target: str, frame: Mapping[str, Any] | None, sweep: Any = None) -> None:
        """The panel asks for the report of a run going on (its latest ``frame``), or of a ``sweep`` going on."""
        if target in self._final or time.time() - self._written.get(target, 0.0) < LIVE_EVERY_S:
            return
        if sweep is not None:
            self._write(target, SWEEP_MIME, sweep.snapshot())
        elif frame is not None:
            self._write(target, RUN_MIME, dict(trim_snapshot(frame)))

    def keep_only(self, targets: set[str]) -> None:
        """Remove the reports of runs no longer listed."""
        for target in [t for t in self._written if t not in targets]:
            self.held.remove(report_name(target))
            self._written.pop(target, None)
            self._final.discard(target)

    def _write(self, target: str, mime: str, data: Any) -> None:
        self.held.write(report_name(target), {"mime": mime, "data": data, "at": time.time()})
        self._written[target] = time.time()

    def close(self) -> None:
        """The kernel ends: its reports stay (``jupyter-torchdist runs --all`` lists its runs a while longer)."""
        if self.held.fd is None:
            return
        for name in self.held.names():
            if name.startswith("."):
                self.held.remove(name)
        self.held.close()
