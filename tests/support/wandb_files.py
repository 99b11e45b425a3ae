"""A W&B run read back from its own files: the run's transaction log (``run-<id>.wandb``), the file ``wandb sync``
uploads, read with W&B's own record type (``wandb.proto.wandb_internal_pb2.Record``).

W&B 0.31 writes no ``wandb-summary.json`` or ``config.yaml`` for an offline run (they come with ``wandb sync``); the
log holds everything: the run (project, group, job type, name), its config, every ``log`` call (history), summary
updates, artifacts and the exit. The log is LevelDB's log format under W&B's header (``:W&B``, a 2-byte magic, a
version byte): 32 KiB blocks of chunks, each with a CRC, a length and a type (full, first, middle, last).
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["WandbRun", "read_run", "offline_runs"]

_BLOCK = 32 * 1024
_HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _chunks(data: bytes) -> list[bytes]:
    """The records of a LevelDB-format log (after W&B's 7-byte header)."""
    out, pending, pos = [], b"", _HEADER
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:
            pos += left   # a block's tail too short for a chunk header: padding
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + _HEADER])
        body = data[pos + _HEADER:pos + _HEADER + length]
        pos += _HEADER + length
        if kind == _FULL:
            out.append(body)
        elif kind == _FIRST:
            pending = body
        elif kind == _MIDDLE:
            pending += body
        elif kind == _LAST:
            out.append(pending + body)
            pending = b""
        elif kind == 0 and length == 0:
            break
    return out


def _value(item: Any) -> Any:
    return json.loads(item.value_json)


@dataclass
class WandbRun:
    folder: str = ""   # its offline folder (what Run.tracking["wandb"] names for an offline run)
    id: str = ""
    project: str = ""
    group: str = ""
    job_type: str = ""
    name: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)   # a dict per log call (with "_step")
    summary: dict[str, Any] = field(default_factory=dict)
    artifacts: list[dict[str, Any]] = field(default_factory=list)  # name, type, and the files' names
    exit_code: int | None = None


def read_run(log: Path) -> WandbRun:
    from wandb.proto import wandb_internal_pb2 as pb

    run = WandbRun(folder=str(log.parent))
    data = log.read_bytes()
    assert data[:4] == b":W&B", f"{log} is not a W&B transaction log"
    for chunk in _chunks(data):
        rec = pb.Record()
        rec.ParseFromString(chunk)
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            r = rec.run
            run.id, run.project, run.group, run.job_type, run.name = (r.run_id, r.project, r.run_group, r.job_type,
                                                                     r.display_name)
            run.config.update({i.key: _value(i) for i in r.config.update})
        elif kind == "config":
            run.config.update({i.key: _value(i) for i in rec.config.update})
        elif kind == "history":
            run.history.append({i.key or "/".join(i.nested_key): _value(i) for i in rec.history.item})
        elif kind == "summary":
            run.summary.update({i.key or "/".join(i.nested_key): _value(i) for i in rec.summary.update})
        elif kind == "artifact":
            a = rec.artifact
            run.artifacts.append({"name": a.name, "type": a.type, "files": sorted(e.path for e in a.manifest.contents)})
        elif kind == "exit":
            run.exit_code = rec.exit.exit_code
    return run


def offline_runs(folder: Path) -> dict[str, WandbRun]:
    """Every offline run under ``folder`` (a ``WANDB_DIR``), by W&B run id; a run resumed in a second folder is the
    latest folder's."""
    out = {}
    for log in sorted(folder.glob("wandb/offline-run-*/run-*.wandb")):
        run = read_run(log)
        out[run.id] = run
    return out
