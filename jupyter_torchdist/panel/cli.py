"""``jupyter-torchdist runs [--json] [--all]`` and ``jupyter-torchdist stop RUN_ID``: the runs panel in a terminal.

They read and write the same registry as the panel (``JUPYTER_RUNTIME_DIR``, else Jupyter's runtime directory: the
folder of your kernels' connection files), with or without a Jupyter server: a JupyterHub terminal, or an admin
checking their own account. ``runs`` prints the runs of living kernels (``--all``: also those of kernels that ended
or died in the last day), a sweep's members under it; ``--json`` prints the API's list. ``stop`` leaves the request
the run's kernel takes within a second, busy or not, and waits for the run to end (``--wait SECONDS``, 0: not).
Exit status: 0, 1 (no such run, it has ended, its kernel does not answer), 2 (usage).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any, Final, TextIO

from ..views.style import duration, progress, rate
from ..views.report_text import text_table
from .asks import ask, wait_taken
from ..core.held_folder import RegistryError, registry_dir
from .listing import find, going, list_runs
from .registry import RunEntry

__all__ = ["main", "VERBS", "table"]

VERBS: Final = ("runs", "stop")
TAKEN_S: Final = 5.0
COLUMNS: Final = ("RUN", "STATE", "NOTEBOOK", "PROGRESS", "RATE", "METRIC", "BACKEND", "AGE", "CELL")


def _parser(verb: str) -> argparse.ArgumentParser:
    about = {"runs": "The %%distribute runs of your kernels, as the JupyterLab \"Distributed runs\" panel lists them "
                     "(read from Jupyter's runtime directory: JUPYTER_RUNTIME_DIR, else Jupyter's default).",
             "stop": "Stop a run (or a sweep) of one of your kernels: its kernel takes the request within a second, "
                     "even while a cell runs."}
    p = argparse.ArgumentParser(prog=f"jupyter-torchdist {verb}", description=about[verb])
    if verb == "runs":
        p.add_argument("--json", action="store_true", help="print the list as the runs panel's API gives it")
        p.add_argument("--all", action="store_true", help="also the runs of kernels that ended in the last day")
    else:
        p.add_argument("run_id", metavar="RUN_ID", help="a run's (or sweep's) id, as `jupyter-torchdist runs` lists it")
        p.add_argument("--wait", type=float, default=60.0, metavar="SECONDS",
                       help="wait this long for the run to end (default 60; 0: ask and return)")
    return p


def _age(entry: RunEntry, now: float) -> str:
    return duration(now - float(entry.get("submitted") or now)).replace(" s", "s")


def _metric(entry: RunEntry) -> str:
    m = entry.get("metric")
    return f"{m['name']} {m['value']:.4g}" if isinstance(m, dict) and isinstance(m.get("value"), (int, float)) else \
        f"{m['name']} {m['value']}" if isinstance(m, dict) else "-"


def _row(entry: RunEntry, now: float, member: bool) -> list[str]:
    shown, _ = progress(entry)
    if entry.get("kind") == "sweep":
        counts = entry.get("counts") or {}
        shown = f"{entry.get('step') or 0}/{entry.get('total') or '?'} ended" + \
            (f" ({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))})" if counts else "")
    run_id = ("  " + entry["id"]) if member else entry["id"]
    cell = entry.get("params") if member else entry.get("cell")
    notebook = str(entry.get("notebook") or "-") + (" (no kernel)" if entry.get("detached") else "")
    return [run_id, str(entry.get("state")), notebook, shown,
            rate(entry.get("rate")) if entry.get("kind") == "run" and going(entry) else "-", _metric(entry),
            str(entry.get("backend") or "-"), _age(entry, now), str(cell or "")]


def table(entries: list[RunEntry], now: float | None = None) -> list[str]:
    """The runs as text: a sweep's members under their sweep, indented."""
    now = time.time() if now is None else now
    rows = []
    for e in entries:
        if e.get("sweep"):
            continue
        rows.append(_row(e, now, False))
        members = sorted((m for m in entries if m.get("sweep") == e["id"]), key=lambda m: m.get("number", 0))
        rows += [_row(m, now, True) for m in members]
    return text_table(COLUMNS, rows, widest=60, free_last=True)


def _runs(args: argparse.Namespace, out: TextIO) -> int:
    entries = list_runs(registry_dir(), args.all)
    if args.json:
        print(json.dumps(entries, indent=1, default=str), file=out)
    elif not entries:
        print("no runs" + ("" if args.all else " in living kernels (--all: also those of kernels that ended)"),
              file=out)
    else:
        print("\n".join(table(entries)), file=out)
    return 0


def _stop(args: argparse.Namespace, out: TextIO) -> int:
    folder = registry_dir()
    hit = find(folder, args.run_id)
    if hit is None or folder is None:
        print(f"no run {args.run_id}: `jupyter-torchdist runs` lists them", file=sys.stderr)
        return 1
    if not going(hit.entry):
        print(f"run {args.run_id} has already ended ({hit.entry.get('state')})", file=sys.stderr)
        return 1
    try:
        path = ask(folder, hit.record["kernel_id"], "stop", hit.entry["id"], by="jupyter-torchdist stop")
    except FileNotFoundError:
        print(f"the kernel of run {args.run_id} takes no requests: it has ended", file=sys.stderr)
        return 1
    if not wait_taken(path, TAKEN_S):
        print(f"the kernel of run {args.run_id} has not taken the request in {TAKEN_S:g} s (it takes it when its "
              "process runs again; a kernel that stays silent can be interrupted or restarted)", file=sys.stderr)
        return 1
    print(f"run {args.run_id}: asked to stop", file=out, flush=True)
    return _wait_end(folder, args.run_id, args.wait, out)


def _wait_end(folder: Any, run_id: str, wait: float, out: TextIO) -> int:
    deadline = time.monotonic() + max(0.0, wait)
    while wait > 0:
        hit = find(folder, run_id)
        if hit is None or not going(hit.entry):
            print(f"run {run_id}: {hit.entry.get('state') if hit else 'gone'}", file=out)
            return 0
        if time.monotonic() >= deadline:
            print(f"run {run_id} is still {hit.entry.get('state')} after {wait:g} s", file=out)
            return 1
        time.sleep(0.2)
    return 0


def main(argv: Sequence[str]) -> int:
    """``argv``: the verb and its arguments (``["runs", "--json"]``)."""
    verb, rest = argv[0], list(argv[1:])
    try:
        args = _parser(verb).parse_args(rest)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        return _runs(args, sys.stdout) if verb == "runs" else _stop(args, sys.stdout)
    except RegistryError as exc:
        print(f"jupyter-torchdist {verb}: {exc}", file=sys.stderr)
        return 1
