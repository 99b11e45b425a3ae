"""``jupyter-torchdist tracking [resend|drop] [WHERE...]``: the records not yet sent, by destination, and what to do
with them.

``tracking`` lists each destination with records waiting (how many runs, how much, and what its shipper last said:
down since when, or refused and what to do). ``tracking resend [WHERE...]`` asks every live kernel's shipper to try
those destinations now, and sends the journals no live kernel holds from here (waiting up to ``--timeout``
seconds). ``tracking drop WHERE...`` (or ``--all``) gives up their records: journals no kernel holds at once, the
others by their kernel's shipper (the command leaves it the order). ``WHERE`` is a tracker's name (``mlflow``), an
address as listed, or a number from the list.
"""
from __future__ import annotations

import sys
import time
from typing import Final

from .journal import spool_dir
from .outbox import Waiting, give_order, waiting

__all__ = ["main", "describe"]

USAGE: Final = ("usage: jupyter-torchdist tracking [resend [WHERE...] [--timeout S] | drop WHERE...|--all]\n"
                "  WHERE: a tracker (mlflow), an address as listed, or its number in the list")


def describe(entry: Waiting) -> str:
    """One destination's line: what waits, and what its shipper last said."""
    runs = len(entry.jids)
    line = f"{entry.label}: records of {runs} run{'s' if runs != 1 else ''} not yet sent ({_size(entry.size)})"
    status = entry.status or {}
    if status.get("state") == "refused":
        line += f"; refused: {status.get('why')}; to do: {status.get('fix')}"
    elif status.get("state") == "down":
        since = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(status.get("since") or 0)))
        line += f"; down since {since}: {status.get('why')}"
    if entry.held:
        line += f"; {len(entry.held)} held by a live kernel"
    return line


def _size(size: int) -> str:
    return f"{size / 1024 / 1024:.1f} MB" if size >= 1024 * 1024 else f"{max(1, round(size / 1024))} KB"


def _pick(found: list[Waiting], where: list[str]) -> list[Waiting] | None:
    if where == ["--all"] or not where:
        return found
    picked = []
    for token in where:
        hits = [e for i, e in enumerate(found, 1)
                if token in (e.tracker, e.address, e.label, str(i))]
        if not hits:
            return None
        picked += [e for e in hits if e not in picked]
    return picked


def main(argv: list[str]) -> int:
    spool = spool_dir()
    verb = argv[0] if argv else "list"
    rest = argv[1:]
    if verb in ("-h", "--help"):
        print(USAGE + "\n\n" + (__doc__ or "").split("\n\n", 1)[1])
        return 0
    timeout = 60.0
    if "--timeout" in rest:
        i = rest.index("--timeout")
        try:
            timeout = float(rest[i + 1])
        except (IndexError, ValueError):
            print(USAGE, file=sys.stderr)
            return 2
        del rest[i:i + 2]
    found = waiting(spool)
    if verb == "list":
        for i, entry in enumerate(found, 1):
            print(f"{i}. {describe(entry)}")
        print(f"nothing waits in {spool}" if not found else f"(in {spool})")
        return 0
    if verb not in ("resend", "drop") or (verb == "drop" and not rest):
        print(USAGE, file=sys.stderr)
        return 2
    picked = _pick(found, rest)
    if picked is None:
        print(f"no records wait for {' '.join(rest)}; `jupyter-torchdist tracking` lists what waits", file=sys.stderr)
        return 2
    return _resend(spool, picked, timeout) if verb == "resend" else _drop(spool, picked)


def _resend(spool: str, picked: list[Waiting], timeout: float) -> int:
    from .shipper import Shipper

    for entry in picked:
        give_order(spool, entry.tracker, entry.address, "resend", entry.jids)
    here = Shipper(spool, only={(e.tracker, e.address) for e in picked})
    try:
        sent = here.flush(timeout, taken=True)
    finally:
        here.close()
    left = [e for e in waiting(spool) if (e.tracker, e.address) in here.only_keys()]
    for entry in left:
        print(describe(entry))
    if not left:
        print("sent")
        return 0
    held = sum(len(e.held) for e in left)
    if held:
        print(f"{held} journal(s) are held by a live kernel: its shipper tries them now")
    return 0 if sent and not [e for e in left if len(e.held) < len(e.jids)] else 1


def _drop(spool: str, picked: list[Waiting]) -> int:
    from .shipper import Shipper

    here = Shipper(spool, only={(e.tracker, e.address) for e in picked}, background=False)
    try:
        for entry in picked:
            mine = [jid for jid in entry.jids if jid not in entry.held]
            done = here.drop(entry.tracker, entry.address, mine)
            if entry.held:
                give_order(spool, entry.tracker, entry.address, "drop", entry.held)
            print(f"{entry.label}: records of {done} run(s) dropped"
                  + (f"; {len(entry.held)} held by a live kernel, dropped by its shipper" if entry.held else ""))
    finally:
        here.close()
    return 0
