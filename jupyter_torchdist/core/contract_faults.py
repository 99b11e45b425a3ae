"""The contract's messages about faults: a host's heartbeat and a restart's commits.

Part of the one vocabulary: ``contract.py`` imports every name here and puts the messages in its unions, so the
channel's checks and the kernel's exhaustive dispatch cover them like any other message. They live in a module of
their own only to keep each module short.

* ``BEAT`` (agent -> kernel), every ``HEARTBEAT_S`` while a rank's agent runs: its host and its link are there. A
  rank whose agent and rank both say nothing for five of them is lost (``kernel.supervisor.SILENCE_S``).
* ``COMMIT`` (rank 0 -> kernel): ``jupyter_torchdist.commit`` wrote the state a restart resumes from.
"""
from __future__ import annotations

from typing import Final, Literal, TypedDict

__all__ = ["BEAT", "COMMIT", "HEARTBEAT_S", "BeatMsg", "CommitMsg"]

BEAT: Final = "beat"
COMMIT: Final = "commit"
HEARTBEAT_S: Final = 2.0


class BeatMsg(TypedDict):
    t: Literal["beat"]


class CommitMsg(TypedDict):
    t: Literal["commit"]
    step: int
    bytes: int                # the commit's size
    seconds: float            # serialising (on the training thread) and writing (on its own) it took
    at: float
