"""The view where no widget can render (terminal IPython, scripts): lines of text, never redrawn."""
from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from .report_text import report_text
from .report_text import place_lines
from .trim import trim_snapshot
from .usage_words import data_line

__all__ = ["TextView"]

SUMMARY_EVERY_S = 5.0


def _progress(r: dict[str, Any]) -> str:
    if r.get("step") is None:
        return ""
    total = f"/{r['total']}" if r.get("total") else ""
    rate = f" {r['rate']:.1f}/s" if r.get("rate") else ""
    metrics = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r["metrics"].items())
    return f"step {r['step']}{total}{rate} {metrics}".rstrip()


class TextView:
    """Prints state changes and each rank's output as it comes, prefixed by rank; a summary now and then."""
    log_tail = 500
    focus: frozenset[int] = frozenset()

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self._states: dict[int, str] = {}
        self._lines: dict[int, int] = {}
        self._last_summary = time.monotonic()
        self._stall: int | None = None   # a stall was said (how many places with it), None: not stalled

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def start(self, snapshot: dict[str, Any]) -> None:
        self._print(f"[torchdist] {snapshot['world_size']} ranks on {snapshot['backend']}")

    def _new_lines(self, r: dict[str, Any]) -> None:
        new = r["log_lines"] - self._lines.get(r["rank"], 0)
        if new <= 0:
            return
        self._lines[r["rank"]] = r["log_lines"]
        tail = r["log_tail"][-new:]
        if new > len(tail):
            self._print(f"[rank {r['rank']}] ... {new - len(tail)} lines not shown")
        for stream, text in tail:
            self._print(f"[rank {r['rank']}{'!' if stream == 'stderr' else ''}] {text}")

    def update(self, snapshot: dict[str, Any]) -> None:
        for r in snapshot["ranks"]:
            self._new_lines(r)
            if self._states.get(r["rank"]) != r["state"]:
                self._states[r["rank"]] = r["state"]
                where = f" on {r['host']}" if r["host"] else ""
                self._print(f"[rank {r['rank']}] {r['state']}{where}" + (f": {r['error']}" if r["error"] else ""))
        self._say_stall(snapshot)
        now = time.monotonic()
        if now - self._last_summary >= SUMMARY_EVERY_S:
            self._last_summary = now
            parts = [f"r{r['rank']} {_progress(r)}" for r in snapshot["ranks"] if _progress(r)]
            data = data_line(snapshot.get("data"))
            parts += [data] if data else []
            if parts:
                self._print(f"[torchdist] {snapshot['elapsed_s']:.0f}s  " + " | ".join(parts))

    def _say_stall(self, snapshot: dict[str, Any]) -> None:
        """A stall is said once, and where each rank is as soon as they answered (the run goes on)."""
        stall = snapshot.get("stall")
        if not stall:
            self._stall = None
            return
        if self._stall is None:
            self._print(f"[torchdist] {stall}")
            self._stall = 0
        places = place_lines(trim_snapshot(snapshot)["ranks"]) if self._stall == 0 else []
        for line in places:
            self._print(f"[torchdist]   {line}")
        self._stall = self._stall or len(places)

    def finish(self, snapshot: dict[str, Any]) -> None:
        self.update(snapshot)
        self._print(report_text(snapshot))
