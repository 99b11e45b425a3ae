"""What the kernel says to a rank (the end of every rank's cell, a kept rank's next cell, a ``batches()`` epoch's
plan or why it cannot come) and to a rank's agent (stop it, interrupt it).

The answer to a rank's hello is in ``rendezvous.py``, the kernel's side of debugging in ``debug.py``.
"""
from __future__ import annotations

from typing import Final, Literal, TypedDict

from .code import CodeShip

__all__ = ["RELEASE", "CELL", "DATA_PLAN", "DATA_ERROR", "PREEMPT", "STOP", "INTERRUPT", "ReleaseMsg", "CellMsg",
           "DataPlanMsg", "DataErrorMsg", "PreemptMsg", "StopMsg", "InterruptMsg"]

RELEASE: Final = "release"        # rank: every rank has ended its cell; you may exit now
CELL: Final = "cell"              # kept rank: run this payload next, in your namespace
DATA_PLAN: Final = "data_plan"    # rank: your epoch is planned (steps); data workers are on their way
DATA_ERROR: Final = "data_error"  # rank: the data for that epoch cannot come (the transform raised, ...)
PREEMPT: Final = "preempt"        # rank: a rank of the run was told to go: jt.preempted() is true, commit now
STOP: Final = "stop"              # agent: kill your rank now
INTERRUPT: Final = "interrupt"    # agent: deliver SIGINT to your rank (kept ranks survive it)


class ReleaseMsg(TypedDict):
    t: Literal["release"]


class _Cell(TypedDict):
    t: Literal["cell"]
    cell: int             # kept ranks count their cells from 1 (the payload that started them)
    payload: bytes        # cloudpickle of a rank.kept.KeptCell or KeptCall
    filename: str
    source: str
    all_ranks: bool
    max_value_bytes: int


class CellMsg(_Cell, total=False):
    post_mortem: bool     # --pdb: a failing rank offers the kernel its post-mortem
    code: CodeShip | None  # the notebook's code as of this cell: edited modules are reloaded before it runs


class DataPlanMsg(TypedDict):
    t: Literal["data_plan"]
    seq: int
    steps: int                # batches every rank gets this epoch (from where it resumes, on a restart)
    rows: int                 # rows used this epoch (all ranks)
    left_out: int
    workers: int
    lanes: int                # the plan's data workers: a restart resumes the epoch with the same plan


class DataErrorMsg(TypedDict):
    t: Literal["data_error"]
    seq: int
    summary: str
    traceback: str


class PreemptMsg(TypedDict):
    t: Literal["preempt"]
    rank: int                 # the rank that was told to go
    grace_s: float            # ... and how long it has


# -- to a rank's agent ----------------------------------------------------------------------------------------
class StopMsg(TypedDict):
    t: Literal["stop"]
    reason: str


class InterruptMsg(TypedDict):
    t: Literal["interrupt"]
