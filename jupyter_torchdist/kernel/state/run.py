"""What we know about a run, built from messages and transitions only: no I/O, no threads, no clock.

``RunState.apply`` folds one inbound message into the state. Its dispatch on ``msg["t"]`` is exhaustive
over the contract's unions: each step hands what it did not handle to the next, typed as what is left, and
the last to ``contract.unhandled``, so a message type added to a union without a branch here makes mypy
fail. What a message says about one rank is ``RankState``'s (``rank_state.py``); the
status transitions (``begin_stop``, ``close_out``, ``conclude``...) are ``RunLifecycle``'s
(``lifecycle.py``); ``snapshot`` turns the state into the one schema every view draws (``snapshot.py``).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Union

from ...core import contract as C
from ...views.schema import RunSnapshot
from .lifecycle import STOP_REASONS, RunLifecycle
from .rank import FINAL, HISTORY_POINTS, LOG_KEEP, RankState
from .snapshot import LOG_TAIL, run_snapshot
from .stall import fold_debug
from .many_ranks import is_many
from .resource_use import fold_data_status

__all__ = ["RankState", "RunState", "LOG_TAIL", "LOG_KEEP", "HISTORY_POINTS", "FINAL", "STOP_REASONS"]

# About one rank: everything inbound but the launcher's run-wide messages (JOB_END, DATA_STATUS); of these,
# what the rank's agent, the channel or the launcher say of it (the rest the rank says itself).
_SaidOfRank = Union[C.AgentMessage, C.ChannelNotice, C.LostMsg, C.StoppedMsg]
_AboutRank = Union[C.RankMessage, _SaidOfRank]


class RunState(RunLifecycle):
    """The run's record (``RunLifecycle``), and the messages folded into it."""

    def apply(self, rank: int, role: C.Role, msg: C.InboundMessage, at: float) -> None:
        """Fold one message in; ``rank`` is -1 for the launcher's run-wide messages. A message its role
        does not send (``contract.INBOUND``) is ignored, as is a message about a rank that is not given."""
        if (role, msg.get("t")) not in C.INBOUND:
            return
        fold_debug(self.debug, self.ranks, rank, role, msg, at)  # where the rank is; whether the run moves
        if msg["t"] == C.JOB_END:
            self.job_ended_at, self.job_error = at, msg.get("error")
            notice = msg.get("notice")
            if notice and notice not in self.notes:
                self.notes.append(notice)
        elif msg["t"] == C.DATA_STATUS:
            fold_data_status(self.data, msg)
        elif msg["t"] == C.WHERE_WANTED:
            pass  # the user asked for the stacks: the supervisor asks the ranks, their PLACEs fold in
        elif msg["t"] == C.STOP_WANTED:
            self.stopped_early = bool(msg.get("early")) and (self.stopped_by is None or self.stopped_early)
            self.stopped_by = self.stopped_by or msg.get("by") or "run.stop()"  # the supervisor stops the run
        elif msg["t"] == C.FOCUS_WANTED:
            pass  # the view opened these ranks: the supervisor's next frame shows them in full
        elif rank >= 0:
            self._about_rank(self.ranks[rank], role, msg, at)

    def _about_rank(self, rs: RankState, role: C.Role, msg: _AboutRank, at: float) -> None:
        """What the rank says (most messages, so first), else what its agent, the channel or the launcher say."""
        if role != C.BACKEND:
            rs.heard(at)  # any word from the rank or its agent: its host and link are there
        if msg["t"] == C.PROGRESS:
            rs.on_progress(msg, at)
        elif msg["t"] == C.LOG:
            rs.on_log(msg)
        elif msg["t"] == C.USAGE:
            rs.on_usage(msg, at)
        elif msg["t"] == C.HELLO:
            rs.on_hello(msg, at)
        elif msg["t"] == C.STATE:
            if rs.on_state(msg) and self.status == "starting" and rs.state == "running":
                self.status = "running"
        elif msg["t"] == C.DROPPED:
            rs.on_dropped(msg)
        elif msg["t"] == C.RESULT:
            self._result(rs, msg, at)
        elif msg["t"] == C.FAILED:
            if not self._other_cell(msg.get("cell")):
                self.record(rs, rs.on_failed(msg, at, stopping=self.stop_reason is not None,
                                             stopped_by_user=self.stop_reason in ("interrupted", "timeout")))
        elif msg["t"] == C.DATA_OPEN or msg["t"] == C.DATA_DONE:
            pass  # batches(): the data service answers it; the rank's usage shows its wait
        elif msg["t"] == C.COMMIT:
            self.committed = (int(msg.get("step", 0)), at, int(msg.get("bytes", 0)), float(msg.get("seconds", 0.0)))
        elif msg["t"] == C.PREEMPTED:
            self._preempted(rs, msg, at)
        elif msg["t"] == C.PROFILE:
            rs.on_profile(msg)  # the trace itself is written by the run's recorder (tracking/recorder.py)
        elif msg["t"] == C.PLACE or msg["t"] == C.PDB:
            pass  # where it is, its debugger: folded by fold_debug; the supervisor answers prompts
        else:
            self._said_of_rank(rs, role, msg, at)

    def _preempted(self, rs: RankState, msg: C.PreemptedMsg, at: float) -> None:
        """A rank's process was told to go: said once, in the view; the supervisor tells every rank."""
        if rs.preempted_at is None:
            rs.preempted_at = at
            grace = float(msg.get("grace_s") or 0.0)
            self.notes.append(f"rank {rs.rank} was told to go (SIGTERM): it exits in {grace:g} s; "
                              "every rank's jt.preempted() is true, so a jt.commit now is what a restart resumes from")

    def _said_of_rank(self, rs: RankState, role: C.Role, msg: _SaidOfRank, at: float) -> None:
        if msg["t"] == C.CONNECTED:
            if role == C.RANK:
                rs.on_connected()  # an agent's connection says nothing: its EXIT (or the channel's LOST) does
        elif msg["t"] == C.DISCONNECTED:
            if role == C.RANK:
                self.record(rs, rs.on_disconnected())
        elif msg["t"] == C.AGENT_HELLO:
            rs.on_agent_hello(msg, at)
        elif msg["t"] == C.BEAT:
            pass  # heard (above): nothing else to fold
        elif msg["t"] == C.EXIT:
            self.record(rs, rs.on_exit(msg, at))
        elif msg["t"] == C.LOST:
            self.record(rs, rs.on_lost(msg.get("summary", "lost"), msg.get("traceback", ""), at))
        elif msg["t"] == C.STOPPED:
            rs.on_stopped(at)
        else:
            C.unhandled(msg)

    def _result(self, rs: RankState, msg: C.ResultMsg, at: float) -> None:
        if not self._other_cell(msg.get("cell")) and rs.on_result(msg, at) and rs.rank == 0:
            shown = msg.get("repr")
            if shown is not None:
                self.value_repr = shown

    def _other_cell(self, cell: int | None) -> bool:
        """A kept rank's late word about an earlier cell: not about this one."""
        return self.cell is not None and cell != self.cell

    def snapshot(self, *, log_tail: int = LOG_TAIL, focus: Iterable[int] = ()) -> RunSnapshot:
        """The JSON-able picture of the run every view draws (``views.schema.RunSnapshot``); ``focus``: ranks the
        view asked to see in full (a many-rank run shows only its featured ranks so)."""
        if is_many(self.world_size):
            self.band.sample(self.ranks)
        return run_snapshot(self, log_tail, focus, self.band)
