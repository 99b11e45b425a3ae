"""Who sends what: the roles a connection authenticates as, the unions of message types each may send or receive,
the ``Inbound`` envelope the kernel's inbox carries, and the sets derived from the unions (the channel drops anything
else). ``unhandled`` closes every dispatch on ``msg["t"]``: mypy fails if a type of a union is left out."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NoReturn, Union, get_args, get_type_hints

from .rank_messages import AgentHelloMsg, BeatMsg, ExitMsg
from .debug import PdbMsg, PdbReplyMsg, PlaceMsg, WhereMsg, WhereWantedMsg
from .kernel_messages import CellMsg, DataErrorMsg, DataPlanMsg, InterruptMsg, PreemptMsg, ReleaseMsg, StopMsg
from .notices import (ConnectedMsg, DataStatusMsg, DisconnectedMsg, FocusWantedMsg, JobEndMsg, LostMsg, StoppedMsg,
                      StopWantedMsg)
from .rank_messages import (CommitMsg, DataDoneMsg, DataOpenMsg, DroppedMsg, FailedMsg, LogMsg, PreemptedMsg,
                            ProfileMsg, ProgressMsg, ResultMsg, StateMsg, UsageMsg)
from .plan import HelloMsg, RendezvousMsg

__all__ = ["RANK", "AGENT", "BACKEND", "Role", "RankMessage", "FinalMessage", "AgentMessage", "ChannelNotice",
           "BackendMessage", "InboundMessage", "DataReply", "ToRank", "ToAgent", "OutboundMessage", "unhandled",
           "Inbound", "RANK_SENDS", "AGENT_SENDS", "CHANNEL_SAYS", "BACKEND_SAYS", "INBOUND", "SENDS"]

# -- roles: who a message comes from ------------------------------------------------------------------
RANK: Final = "rank"        # the process running the user's code
AGENT: Final = "agent"      # the watcher that forked it (a Spark task, or a --local agent)
BACKEND: Final = "backend"  # the kernel's own launcher or channel, speaking for a rank it lost
Role = Literal["rank", "agent", "backend"]

# -- who sends what ------------------------------------------------------------------------------------
RankMessage = Union[HelloMsg, StateMsg, ProgressMsg, LogMsg, ResultMsg, FailedMsg, DroppedMsg, UsageMsg,
                    DataOpenMsg, DataDoneMsg, CommitMsg, PlaceMsg, PdbMsg, ProfileMsg, PreemptedMsg]
FinalMessage = Union[ResultMsg, FailedMsg]  # how a rank's cell ended
AgentMessage = Union[AgentHelloMsg, ExitMsg, BeatMsg]
ChannelNotice = Union[ConnectedMsg, DisconnectedMsg]        # said for a rank's and an agent's connection alike
BackendMessage = Union[LostMsg, StoppedMsg, JobEndMsg, DataStatusMsg, WhereWantedMsg, StopWantedMsg, FocusWantedMsg]
InboundMessage = Union[RankMessage, AgentMessage, ChannelNotice, BackendMessage]
DataReply = Union[DataPlanMsg, DataErrorMsg]                # what answers a rank's DATA_OPEN
ToRank = Union[RendezvousMsg, ReleaseMsg, CellMsg, DataReply, WhereMsg, PdbReplyMsg, PreemptMsg]
ToAgent = Union[StopMsg, InterruptMsg]
OutboundMessage = Union[ToRank, ToAgent]


def unhandled(msg: NoReturn) -> None:
    """The last ``else`` of a dispatch on ``msg["t"]``: mypy fails unless every type of the union was
    handled above it (what is left is then nothing). At run time it does nothing: the message is ignored."""


def _kinds(union: Any) -> frozenset[str]:
    """The ``"t"`` values of a union of message types, read from their ``Literal`` annotations."""
    return frozenset(t for cls in get_args(union) for t in get_args(get_type_hints(cls)["t"]))


@dataclass(frozen=True)
class Inbound:
    """One message for the kernel, stamped with the rank and role its connection authenticated as."""
    rank: int
    role: Role
    msg: InboundMessage
    at: float = field(default_factory=time.time)


# -- derived from the unions: who may send what (the channel drops anything else) --------------------------
RANK_SENDS: Final = _kinds(RankMessage)
AGENT_SENDS: Final = _kinds(AgentMessage)
CHANNEL_SAYS: Final = _kinds(ChannelNotice)
BACKEND_SAYS: Final = _kinds(BackendMessage)
SENDS: Final[dict[str, frozenset[str]]] = {RANK: RANK_SENDS, AGENT: AGENT_SENDS}  # over a connection

# Every (role, type) the kernel can receive. Channel notices come for both connection roles.
INBOUND: Final = frozenset({(RANK, t) for t in RANK_SENDS | CHANNEL_SAYS} | {(BACKEND, t) for t in BACKEND_SAYS}
                           | {(AGENT, t) for t in AGENT_SENDS | CHANNEL_SAYS})
