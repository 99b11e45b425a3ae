"""What a rank's agent (the watcher that forked it: a Spark task, or a ``--local`` agent) says to the kernel.

* ``BEAT``, every ``HEARTBEAT_S`` while the agent runs: its host and its link are there. A rank whose agent and rank
  both say nothing for five of them is lost (``kernel.runs.supervisor.SILENCE_S``).
"""
from __future__ import annotations

from typing import Final, Literal, TypedDict

__all__ = ["AGENT_HELLO", "EXIT", "BEAT", "HEARTBEAT_S", "AgentHelloMsg", "ExitMsg", "BeatMsg"]

AGENT_HELLO: Final = "agent"    # the agent's host and pid, and its rank's pid
EXIT: Final = "exit"            # how the rank's process ended (code or signal; stopped by us or not)
BEAT: Final = "beat"            # every HEARTBEAT_S: the agent and its link are there
HEARTBEAT_S: Final = 2.0


class AgentHelloMsg(TypedDict):
    t: Literal["agent"]
    host: str
    pid: int
    child: int                # the rank's pid


class ExitMsg(TypedDict):
    t: Literal["exit"]
    code: int | None
    signal: str | None
    stopped: bool             # the agent killed the rank because the kernel said STOP
    at: float


class BeatMsg(TypedDict):
    t: Literal["beat"]
