"""What the kernel's own side says into a run's inbox: its channel about a connection, its launcher about a rank it
lost or the job's end, its data service about the data workers, and the user's requests from the notebook.

* ``STOP_WANTED`` (rank -1): the user asked to stop that run only (``run.stop()``, the Stop control of a background
  run's view, a sweep's ``stop()``, the kernel's shutdown). A foreground run is stopped by the kernel's interrupt
  instead; its supervisor takes this message all the same. A sweep's early stop of a member says ``early``: it
  stops nothing once every rank has ended or reported its last step (``total``).
* ``FOCUS_WANTED`` (rank -1): the user opened these ranks in a many-rank run's view, whose snapshot then carries
  their full rows (their logs, stack, curve) besides the featured ranks'.

The user's request for every rank's stack (``WHERE_WANTED``) is in ``debug.py``.
"""
from __future__ import annotations

from typing import Final, Literal, TypedDict

__all__ = ["CONNECTED", "DISCONNECTED", "LOST", "STOPPED", "JOB_END", "DATA_STATUS", "STOP_WANTED", "FOCUS_WANTED",
           "ConnectedMsg", "DisconnectedMsg", "LostMsg", "StoppedMsg", "JobEndMsg", "DataStatusMsg", "StopWantedMsg",
           "FocusWantedMsg"]

# -- the channel, about a connection
CONNECTED: Final = "connected"
DISCONNECTED: Final = "disconnected"

# -- the launcher or the channel, about a rank it lost
LOST: Final = "lost"            # the agent or executor vanished before saying how the rank ended
STOPPED: Final = "stopped"      # the rank was stopped by the kernel and is gone
JOB_END: Final = "job_end"      # the launcher's job ended (rank -1)
DATA_STATUS: Final = "data_status"  # the data service's workers: how many run, rows made (rank -1)

# -- the user, through the kernel
STOP_WANTED: Final = "stop_wanted"  # stop this run, and nothing else
FOCUS_WANTED: Final = "focus_wanted"  # the view opened these ranks


class ConnectedMsg(TypedDict):
    t: Literal["connected"]


class DisconnectedMsg(TypedDict):
    t: Literal["disconnected"]


class _Lost(TypedDict):
    t: Literal["lost"]
    summary: str


class LostMsg(_Lost, total=False):
    traceback: str
    at: float


class StoppedMsg(TypedDict):
    t: Literal["stopped"]


class _JobEnd(TypedDict):
    t: Literal["job_end"]
    error: str | None


class JobEndMsg(_JobEnd, total=False):
    notice: str           # what the launcher wants the user to know about the run (shown with the state's notes)


class DataStatusMsg(TypedDict):
    t: Literal["data_status"]
    workers: int              # data workers (lanes) of the epoch
    active: int               # ... that still have pieces to make
    running: int              # ... with a Spark task running at this moment
    rows: int                 # rows the data workers have sent this cell


class _StopWanted(TypedDict):
    t: Literal["stop_wanted"]


class StopWantedMsg(_StopWanted, total=False):
    by: str   # who asked, in words ("run.stop()", "the view's Stop", "the kernel's shutdown")
    early: bool   # a sweep's rule stopping a member early: moot once every rank has ended or reported its last
    # step (a member that finished its steps keeps its value; only the user's own stop cuts such a run)


class FocusWantedMsg(TypedDict):
    t: Literal["focus_wanted"]
    ranks: list[int]   # the ranks the user opened (none: closed), a few at most
