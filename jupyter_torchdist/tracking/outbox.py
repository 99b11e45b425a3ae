"""What waits in the spool folder, by destination, for those outside the shipper: the doctor and
``jupyter-torchdist tracking``.

A shipper writes each destination's state when it changes (``<spool>/destinations/<id>.json``: down since when and
why, refused and what to do; removed once it answers), and reads the orders the command line leaves there
(``<spool>/orders/<id>.json``: send again now, or drop the named journals' records for it): a journal a live kernel
holds is that kernel's to send or drop.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

from .journal import destinations, journal_ids, load_state, read_head
from .sinks import address

__all__ = ["dest_id", "write_status", "clear_status", "read_order", "give_order", "Waiting", "waiting"]


def dest_id(tracker: str, where: str) -> str:
    return hashlib.sha256(f"{tracker}\0{where}".encode()).hexdigest()[:16]


def _write(path: str, data: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def _read(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_status(spool: str, tracker: str, where: str, state: str, why: str, fix: str = "",
                 since: float | None = None) -> None:
    """``state``: ``down`` (tried again) or ``refused`` (not, until what ``fix`` says is done)."""
    _write(os.path.join(spool, "destinations", f"{dest_id(tracker, where)}.json"),
           {"tracker": tracker, "address": where, "state": state, "why": why, "fix": fix,
            "since": since or time.time(), "pid": os.getpid()})


def clear_status(spool: str, tracker: str, where: str) -> None:
    try:
        os.remove(os.path.join(spool, "destinations", f"{dest_id(tracker, where)}.json"))
    except FileNotFoundError:
        pass


def read_order(spool: str, tracker: str, where: str) -> dict[str, Any] | None:
    return _read(os.path.join(spool, "orders", f"{dest_id(tracker, where)}.json"))


def give_order(spool: str, tracker: str, where: str, do: str, jids: list[str]) -> None:
    """``do``: ``resend`` (try now, whatever the retry window) or ``drop`` (give up ``jids``' records for it)."""
    _write(os.path.join(spool, "orders", f"{dest_id(tracker, where)}.json"),
           {"do": do, "jids": jids, "at": time.time()})


@dataclass
class Waiting:
    """A destination's records not yet sent."""

    tracker: str
    address: str
    jids: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)   # journals a live kernel holds (its shipper sends them)
    size: int = 0                                   # bytes of records not yet sent
    status: dict[str, Any] | None = None            # its shipper's last word: down or refused, why, what to do

    @property
    def label(self) -> str:
        return f"{self.tracker} {self.address}".strip()


def waiting(spool: str) -> list[Waiting]:
    """Every destination with records not yet sent, oldest first."""
    out: dict[tuple[str, str], Waiting] = {}
    for jid in journal_ids(spool):
        path = os.path.join(spool, f"{jid}.jsonl")
        head = read_head(path)
        if head is None:
            continue
        try:
            size = os.path.getsize(path)
        except OSError:
            continue
        state = load_state(spool, jid)
        held = _held(path)
        for tracker, settings in destinations(head).items():
            if (state.get("closed") or {}).get(tracker):
                continue
            left = size - int((state.get("pos") or {}).get(tracker, 0))
            where = address(tracker, settings)
            entry = out.setdefault((tracker, where), Waiting(tracker, where))
            entry.jids.append(jid)
            entry.size += max(0, left)
            if held:
                entry.held.append(jid)
    for entry in out.values():
        entry.status = _read(os.path.join(spool, "destinations", f"{dest_id(entry.tracker, entry.address)}.json"))
    return list(out.values())


def _held(path: str) -> bool:
    """Whether a live kernel holds the journal (its own, or one it took over to send)."""
    try:
        with open(path, "rb") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
            return False
    except OSError:
        return False
