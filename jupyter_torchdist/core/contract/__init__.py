"""What passes between the kernel, the launchers and the ranks: the one contract, typed, in one package.

Three kinds of process take part in a run:

* the **kernel** (the notebook's process) plans the run, listens on the channel and draws the view;
* an **agent** per rank (a Spark task, or a ``--local`` server's process) forks, watches and reports on it;
* the **rank** runs the user's code.

Every message is a dict whose ``"t"`` names its type (the constants below are the whole vocabulary); the
``TypedDict`` beside each says its fields, its ``t`` a ``Literal`` of that constant. Producers build messages
as their ``TypedDict`` (mypy checks every field), consumers narrow the unions below on ``msg["t"]``. The unions
say who sends what: ``RankMessage``, ``AgentMessage``, ``ChannelNotice`` and ``BackendMessage`` make up
``InboundMessage`` (what the kernel receives), ``ToRank`` and ``ToAgent`` what it sends. ``RANK_SENDS``,
``INBOUND`` and the other sets are derived from the unions, so the channel's check of who may send what and
the kernel's dispatch (exhaustive over the unions: ``unhandled`` makes mypy fail on a type left out) cannot
drift apart. On the wire a message is a plain dict (pickled); the channel stamps what a connection sends
with its ``"rank"``.

Its modules, by meaning: ``rank_messages`` (what a rank says), ``agent_messages`` (what its agent says),
``kernel_messages`` (what the kernel says to both), ``code`` (the notebook's code that travels, and the files
connection that fetches it), ``notices`` (what the kernel's own side says into a run's inbox: its channel,
launchers, data service and the user's requests), ``rendezvous`` (a rank's hello and the kernel's answer), ``debug``
(stacks and pdb, both ways), ``detached`` (a kernel and a detached run's runner), ``plan`` (what travels to every
rank) and ``unions`` (who sends what). Import the names from here: ``from ..core import contract as C``.
"""
from __future__ import annotations

from .rank_messages import (COMMIT, CommitMsg, DATA_DONE, DATA_OPEN, DataDoneMsg, DataOpenMsg, DROPPED, DroppedMsg,
                            FAILED, FailedMsg, LOG, LogMsg, PREEMPTED, PreemptedMsg, PROFILE, ProfileMsg,
                            ProfileShares, PROGRESS,
                            ProgressMsg, RESULT, ResultMsg, STATE, StateMsg, Stream, USAGE, UsageMsg)
from .rank_messages import AGENT_HELLO, AgentHelloMsg, BEAT, BeatMsg, EXIT, ExitMsg, HEARTBEAT_S
from .kernel_messages import (CELL, CellMsg, DATA_ERROR, DATA_PLAN, DataErrorMsg, DataPlanMsg, INTERRUPT,
                              InterruptMsg, PREEMPT, PreemptMsg, RELEASE, ReleaseMsg, STOP, StopMsg)
from .notices import (CONNECTED, ConnectedMsg, DATA_STATUS, DataStatusMsg, DISCONNECTED, DisconnectedMsg,
                      FOCUS_WANTED, FocusWantedMsg, JOB_END, JobEndMsg, LOST, LostMsg, STOP_WANTED, STOPPED,
                      StoppedMsg, StopWantedMsg)
from .debug import (FrameInfo, PDB, PDB_REPLY, PdbKind, PdbMsg, PdbReplyMsg, PLACE, PlaceMsg, WHERE, WHERE_WANTED,
                    WhereMsg, WhereWantedMsg)
from .plan import HELLO, HelloMsg, RENDEZVOUS, RendezvousMsg
from .detached import (LOOK, LookAnswer, LookMsg, MAX_REQUEST_BYTES, RunnerRequest, STOP_ASKED, StopAnswer,
                       StopAskedMsg)
from .plan import LaunchInfo, RunPlan, TLSPin
from .code import BLOB, BlobMsg, Bundle, CodeShip, FETCH, FetchMsg, FilesMessage, NeededImport, PipSet
from .unions import (AGENT, AGENT_SENDS, AgentMessage, BACKEND, BACKEND_SAYS, BackendMessage, CHANNEL_SAYS,
                     ChannelNotice, DataReply, FinalMessage, INBOUND, Inbound, InboundMessage, OutboundMessage, RANK,
                     RANK_SENDS, RankMessage, Role, SENDS, ToAgent, ToRank, unhandled)

__all__ = [
    "RANK", "AGENT", "BACKEND", "Role", "HELLO", "STATE", "PROGRESS", "LOG", "RESULT", "FAILED", "DROPPED", "USAGE",
    "DATA_OPEN", "DATA_DONE", "COMMIT", "AGENT_HELLO", "EXIT", "BEAT", "CONNECTED", "DISCONNECTED", "LOST",
    "STOPPED", "JOB_END", "DATA_STATUS", "RENDEZVOUS", "RELEASE", "CELL", "STOP", "INTERRUPT", "DATA_PLAN",
    "DATA_ERROR", "HelloMsg", "StateMsg", "ProgressMsg", "LogMsg", "ResultMsg", "FailedMsg", "DroppedMsg",
    "UsageMsg", "DataOpenMsg", "DataDoneMsg", "CommitMsg", "AgentHelloMsg", "ExitMsg", "BeatMsg", "ConnectedMsg",
    "DisconnectedMsg", "LostMsg", "StoppedMsg", "JobEndMsg", "DataStatusMsg", "RendezvousMsg", "ReleaseMsg",
    "CellMsg", "DataPlanMsg", "DataErrorMsg", "StopMsg", "InterruptMsg", "Stream", "RankMessage", "FinalMessage",
    "AgentMessage", "ChannelNotice", "BackendMessage", "InboundMessage", "DataReply", "ToRank", "ToAgent",
    "OutboundMessage", "unhandled", "RANK_SENDS", "AGENT_SENDS", "CHANNEL_SAYS", "BACKEND_SAYS", "INBOUND", "SENDS",
    "TLSPin", "RunPlan", "LaunchInfo", "Inbound", "HEARTBEAT_S", "PROFILE", "ProfileMsg", "ProfileShares", "PLACE",
    "PDB", "WHERE", "PDB_REPLY", "WHERE_WANTED", "FrameInfo", "PlaceMsg", "PdbMsg", "WhereMsg", "PdbReplyMsg",
    "WhereWantedMsg", "PdbKind", "STOP_WANTED", "StopWantedMsg", "FOCUS_WANTED", "FocusWantedMsg",
    "FETCH", "BLOB", "FetchMsg", "BlobMsg", "FilesMessage", "Bundle", "CodeShip", "NeededImport", "PipSet",
    "PREEMPTED", "PreemptedMsg", "PREEMPT", "PreemptMsg", "LOOK", "STOP_ASKED", "LookMsg", "StopAskedMsg",
    "RunnerRequest", "LookAnswer", "StopAnswer", "MAX_REQUEST_BYTES",
]
