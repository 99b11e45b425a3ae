"""Limits an administrator sets for every notebook on a server (a teaching lab, a shared JupyterHub host).

* ``JUPYTER_TORCHDIST_MAX_LOCAL_RANKS``: the largest ``-n`` of a run on the kernel's machine as local processes
  (``--local``; and the runs that go to local processes while the embedded session starts, or without Java);
* ``JUPYTER_TORCHDIST_MAX_EMBEDDED_RANKS``: the largest ``-n`` on the embedded local Spark session (which has 256
  task slots: what one notebook may start on the shared machine);
* ``JUPYTER_TORCHDIST_MAX_BACKGROUND_RUNS``: how many background runs and sweeps one notebook may have going at
  once (a sweep counts once; its ``--concurrent`` may not exceed it either).

Set them in the kernel spec's ``env`` (every notebook of the server), or as the extension's configuration in a
server-wide IPython profile (``c.DistributeMagics.max_local_ranks = 4``); the environment wins. A run past a limit
is refused before anything starts, saying which limit and who sets it. They share a machine fairly; they are not a
security boundary (a notebook runs whatever code its user writes).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from typing import Final

from ..core.errors import LaunchError

__all__ = ["Limits", "current", "configure", "check_ranks", "check_background", "ENV"]

ENV: Final = {"local_ranks": "JUPYTER_TORCHDIST_MAX_LOCAL_RANKS",
              "embedded_ranks": "JUPYTER_TORCHDIST_MAX_EMBEDDED_RANKS",
              "background_runs": "JUPYTER_TORCHDIST_MAX_BACKGROUND_RUNS"}
_CONFIG: Final = {"local_ranks": "max_local_ranks", "embedded_ranks": "max_embedded_ranks",
                  "background_runs": "max_background_runs"}
_WHAT: Final = {"local_ranks": "ranks as local processes on this machine",
                "embedded_ranks": "ranks on the embedded local Spark session",
                "background_runs": "background runs and sweeps at once"}


@dataclass(frozen=True)
class Limits:
    """None: no limit."""
    local_ranks: int | None = None
    embedded_ranks: int | None = None
    background_runs: int | None = None


_configured = Limits()


def configure(**values: int | None) -> None:
    """The extension's configuration (``DistributeMagics.max_*``); 0 or None: no limit."""
    global _configured
    _configured = replace(_configured, **{k: (v if v else None) for k, v in values.items()})


def _from_env(name: str) -> int | None:
    text = os.environ.get(ENV[name], "").strip()
    if not text:
        return getattr(_configured, name)
    if not text.isdigit():
        raise LaunchError(f"{ENV[name]}={text!r} is not a whole number: the server's administrator sets it (in the "
                          "kernel's environment) to the largest number allowed, or leaves it unset.")
    return int(text) or None


def current() -> Limits:
    """The limits in force: the environment's, else the configuration's."""
    return Limits(**{f.name: _from_env(f.name) for f in fields(Limits)})


def _refuse(name: str, most: int, asked: str, advice: str) -> LaunchError:
    source = (f"{ENV[name]}={most}" if os.environ.get(ENV[name], "").strip()
              else f"c.DistributeMagics.{_CONFIG[name]} = {most}")
    return LaunchError(f"{asked}, but this server allows at most {most} {_WHAT[name]} per notebook ({source}, set "
                       f"by its administrator). {advice}")


def check_ranks(name: str, n: int) -> None:
    """Refuse ``-n n`` past the limit ``name`` ("local_ranks" or "embedded_ranks")."""
    most = getattr(current(), name)
    if most is not None and n > most:
        raise _refuse(name, most, f"-n {n} asks for {n} {_WHAT[name]}", f"Ask for at most {most}.")


def check_background(going: int, concurrent: int | None = None) -> int | None:
    """Refuse one more background run or sweep when ``going`` are going already, or a sweep's ``--concurrent``
    past the limit; returns the limit (None: none)."""
    most = current().background_runs
    if most is None:
        return None
    if going >= most:
        raise _refuse("background_runs", most, f"{going} background runs or sweeps of this notebook are going",
                      "Wait for one to end (%distribute_wait) or stop one (jupyter_torchdist.runs()[...].stop()).")
    if concurrent is not None and concurrent > most:
        raise _refuse("background_runs", most, f"--concurrent {concurrent} asks for {concurrent} runs at once",
                      f"Ask for --concurrent {most} or fewer.")
    return most
