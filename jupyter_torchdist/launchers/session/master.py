"""Who holds a standalone cluster's cores: the master's own view, for the message of a run that waited in vain.

A standalone master serves its state as JSON on its web UI (``/json/``): every alive worker's cores and every
running application's name and cores. A notebook that waited for task slots can then say which applications
hold them ("alice-lab3: 2 cores, bob-lab3: 2 cores"), the one thing a student needs to ask the right person.
The UI's address is ``spark.jupyter_torchdist.master.ui`` when set, else the master's host on port 8080 (Spark's
default). Anything else (YARN, Kubernetes, a master whose UI does not answer within a second) says nothing.
"""
from __future__ import annotations

import json
import time
import urllib.request
from typing import Any
from urllib.parse import urlsplit

__all__ = ["who_holds_cores", "describe_holders", "UI_KEY"]

UI_KEY = "spark.jupyter_torchdist.master.ui"
_TIMEOUT_S = 1.0


def _ui(master: str, conf: dict[str, str]) -> str | None:
    if conf.get(UI_KEY):
        return conf[UI_KEY].rstrip("/")
    if not master.startswith("spark://"):
        return None
    host = urlsplit(master.split(",")[0]).hostname  # an HA master list: its first master
    return f"http://{host}:8080" if host else None


def describe_holders(state: dict[str, Any], own_app: str | None, now_ms: float) -> str | None:
    """The master's JSON state, in words: cores in use of the total, and which applications hold them."""
    apps = [a for a in state.get("activeapps") or [] if isinstance(a, dict)]
    total, used = int(state.get("cores") or 0), int(state.get("coresused") or 0)
    if not total:
        return None
    holders = []
    for app in sorted(apps, key=lambda a: -int(a.get("cores") or 0)):
        cores = int(app.get("cores") or 0)
        if cores <= 0 or app.get("id") == own_app:
            continue
        began = app.get("starttime")
        minutes = max(0.0, (now_ms - float(began if isinstance(began, (int, float)) else now_ms)) / 60000)
        who = f"{app.get('name') or app.get('id')}" + (f" ({app['user']})" if app.get("user") else "")
        holders.append(f"{who}: {cores} core{'s' if cores != 1 else ''} for {minutes:.0f} min")
    held = "; held by " + ", ".join(holders) if holders else ""
    return f"the master says {used} of its {total} cores are in use{held}"


def who_holds_cores(master: str, conf: dict[str, str], own_app: str | None) -> str | None:
    """What the standalone master says of its cores (one line), or None when it cannot be asked."""
    ui = _ui(master, conf)
    if ui is None:
        return None
    try:
        with urllib.request.urlopen(f"{ui}/json/", timeout=_TIMEOUT_S) as response:
            state = json.loads(response.read(2_000_000))
    except Exception:
        return None
    return describe_holders(state, own_app, time.time() * 1000) if isinstance(state, dict) else None
