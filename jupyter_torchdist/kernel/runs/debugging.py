"""The supervisor's debugging: where each rank is (asked for on demand, on a stall, before a stop) and the ranks'
pdb answered from the notebook.

* **Where**: ``ask_where`` sends ``WHERE`` to the running ranks; their ``PLACE`` answers fold into the state
  (``places.py``) and the views draw them. The live view's Stacks control reaches a busy kernel through its
  control channel (``control.py``), which puts a ``WHERE_WANTED`` in this run's inbox (``tell_foreground``).
* **Before an interrupt or --timeout stops the ranks** (``before_stop``), they are asked where they are and given
  ``PLACE_WAIT_S`` to answer, so the error can say where each rank was (``annotate``).
* **A stall** (``stall.py``) asks once, then every ``STALL_REFRESH_S`` while it lasts.
* **pdb**: a rank's prompt is shown in the cell and answered with ``input()`` on this (the kernel's main)
  thread, labelled with the rank; what the channel brings meanwhile waits in the inbox and is taken right after.
  An interrupt while the prompt waits stops the run as always. ``--pdb``: the first rank whose own failure
  (not a peer's echo) is offered gets its post-mortem; the supervisor holds every stop for failure meanwhile.
  ``q`` in a ``breakpoint()`` session ends the run as an interrupt, said as the user's quit.
"""
from __future__ import annotations

import collections
import queue
import sys
import time
import weakref
from typing import Any, Final, Protocol

from ...core import contract as C
from ...core.contract import Inbound
from ...core.errors import RunError, RunInterrupted, RunTimeout, is_secondary
from ..state.places import ANSWER_S, grouped_where_lines, where_lines
from ..state.many_ranks import is_many
from ..state.stall import stalled

__all__ = ["Debugging", "tell_foreground", "PLACE_WAIT_S", "STALL_REFRESH_S"]

# Before a stop: how long the ranks get to say where they are. Longer than the live view's ANSWER_S: this answer is
# the last the user gets of the run, a rank busy in Python answers at its next bytecode, and on a loaded machine (a
# 2-core host running other notebooks) a second was seen to pass before both ranks of a hung all_reduce answered.
# Ranks that answer sooner end the wait sooner.
PLACE_WAIT_S: Final = 3 * ANSWER_S
STALL_REFRESH_S: Final = 10.0   # while a run is stalled: how often the stacks are asked for again


class Supervised(Protocol):
    """The run as debugging sees it: what it uses of the run's supervisor (``supervisor.Supervisor`` is one)."""

    state: Any          # the run's RunState
    server: Any         # its ChannelServer
    inbox: queue.SimpleQueue[Inbound]
    stop_at: float | None
    dirty: bool
    last_frame: float

    def handle(self, ev: Inbound) -> None: ...
    def stop(self, reason: str) -> None: ...
    def draw(self, now: float) -> None: ...


class _Latest:
    run: weakref.ref[Debugging] | None = None   # the run this kernel supervises now (the Stacks control's)


_latest = _Latest()


def tell_foreground(msg: C.WhereWantedMsg | C.FocusWantedMsg) -> bool:
    """The view asked the foreground run for something (any thread: every rank's stack, ranks in full): True if a
    run is going on to ask."""
    debugging = _latest.run() if _latest.run is not None else None
    if debugging is None or debugging.sup.state.ended_at is not None:
        return False
    debugging.sup.inbox.put(Inbound(-1, C.BACKEND, msg))
    return True


class Debugging:
    def __init__(self, sup: Supervised) -> None:
        self.sup = sup
        self.prompts: collections.deque[tuple[int, C.PdbMsg]] = collections.deque()
        self.post_mortem: int | None = None   # the rank in its post-mortem: failures do not stop the run yet
        self.offered = False                  # one post-mortem per run
        self.capturing = False                # asking where the ranks are before a stop
        self.asked_at: float | None = None
        self.no_stdin: str | None = None      # why prompts could not be answered here
        self.ended_by_us: set[int] = set()    # ranks whose pdb the kernel told "no more input" (a stop, not a q)
        _latest.run = weakref.ref(self)

    def holding(self) -> bool:
        """A stop for failure waits: a post-mortem is on, or the ranks are saying where they are."""
        return self.post_mortem is not None or self.capturing

    # -- messages ------------------------------------------------------------------------------------
    def handle(self, ev: Inbound) -> None:
        msg = ev.msg
        if ev.role == C.BACKEND and msg["t"] == C.WHERE_WANTED:
            self.ask_where()
        elif ev.role == C.RANK and msg["t"] == C.PDB:
            kind = msg.get("kind")
            if kind == "prompt":
                self.prompts.append((ev.rank, msg))
            elif kind == "offer":
                self._offer(ev.rank, msg)
            elif kind == "end" and self.post_mortem == ev.rank:
                self.post_mortem = None
            elif kind == "quit" and ev.rank not in self.ended_by_us:
                self.sup.state.debug.quit_rank = ev.rank
                self.sup.stop("interrupted")

    def _offer(self, rank: int, msg: C.PdbMsg) -> None:
        """--pdb: take the offer of the first rank whose failure is its own, while nothing else failed first."""
        state, text = self.sup.state, msg.get("text", "")
        take = (not self.offered and self.sup.stop_at is None and self.no_stdin is None
                and not any(not f.secondary for f in state.failures.values())
                and not is_secondary(text, msg.get("traceback", "")))
        if take:
            self.offered, self.post_mortem = True, rank
            print(f"rank {rank} raised {text}\nIts post-mortem follows (pdb, in the cell's lines; the other ranks "
                  "wait). q or c ends it; the run then fails with this error.", flush=True)
        self.sup.server.send(rank, C.RANK, {"t": C.PDB_REPLY, "line": "debug" if take else None})

    def ask_where(self, ranks: list[int] | None = None) -> bool:
        """Ask ranks where they are. Not before every rank has said hello: until the rendezvous goes out, a rank
        reads only it (a rank still joining is said to be so, ``places.where_lines``)."""
        now = time.time()
        state = self.sup.state
        if not state.hellos_complete():
            return False
        for rank in state.running_ranks() if ranks is None else ranks:
            if self.sup.server.send(rank, C.RANK, {"t": C.WHERE}):
                state.ranks[rank].debug.asked_at = now
        self.asked_at, self.sup.dirty = now, True
        return True

    # -- time --------------------------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        """The stall rule (asking where the ranks are when it holds), then any prompt waiting for the user."""
        state = self.sup.state
        was = state.debug.stalled_at
        if self.sup.stop_at is None and stalled(state.debug, state.ranks, state.started_at, now):
            if was is None or self.asked_at is None or now - self.asked_at >= STALL_REFRESH_S:
                self.ask_where()
            self.sup.dirty = self.sup.dirty or now - self.sup.last_frame >= 1.0  # its seconds count up
        elif was is not None:
            self.sup.dirty = True
        if self.prompts:
            self._serve()

    # -- pdb in the notebook -------------------------------------------------------------------------------
    def _serve(self) -> None:
        while self.prompts:
            rank, msg = self.prompts.popleft()
            if self.sup.stop_at is not None or self.sup.state.ranks[rank].ended:
                self._answer(rank, None, ours=True)  # the run is ending: pdb reads the end of its input
                continue
            self.sup.draw(time.time())  # the view shows the rank paused while the notebook asks
            line = self._read(rank, msg)  # an interrupt here stops the run: the rank's pdb is left waiting (stopped
            self._answer(rank, line)      # with it, or interrupted on kept ranks), so its quit is no failure
            self._catch_up()

    def _read(self, rank: int, msg: C.PdbMsg) -> str | None:
        """What pdb printed, then its prompt labelled with the rank: the user's line (None: no more input)."""
        text = msg.get("text", "")
        if self.sup.state.background:  # printed from its thread, it would land in whichever cell runs now
            if self.no_stdin is None:
                self.no_stdin = "a background run has no prompt in the notebook (run the cell without --background)"
                self.sup.state.notes.append(f"rank {rank} is in pdb, but {self.no_stdin}: pdb was told there is no "
                                            "more input")
            return None
        if text:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
            sys.stdout.flush()
        if self.no_stdin is not None:
            return None
        try:
            return input(f"rank {rank} {(msg.get('prompt') or '(Pdb) ').strip()} ")
        except EOFError:
            return None
        except Exception as exc:  # IPython's StdinNotImplementedError: a front end that cannot answer input()
            self.no_stdin = f"this front end cannot answer its prompts ({type(exc).__name__})"
            print(f"rank {rank} is in pdb, but {self.no_stdin}: pdb was told there is no more input.", flush=True)
            return None

    def _answer(self, rank: int, line: str | None, *, ours: bool = False) -> None:
        if ours:
            self.ended_by_us.add(rank)
        self.sup.server.send(rank, C.RANK, {"t": C.PDB_REPLY, "line": line})
        self.sup.state.ranks[rank].debug.paused = None
        self.sup.dirty = True

    def _catch_up(self) -> None:
        """Take what the channel brought while the notebook was asked (the loop's clock was stopped)."""
        while True:
            try:
                ev = self.sup.inbox.get_nowait()
            except queue.Empty:
                return
            self.sup.handle(ev)

    # -- stopping ------------------------------------------------------------------------------------------
    def before_stop(self, reason: str) -> None:
        """An interrupt or --timeout is about to stop the ranks: first ask where each is (PLACE_WAIT_S at most)."""
        state = self.sup.state
        if reason not in ("timeout", "interrupted") or state.stop_reason is not None \
                or state.debug.quit_rank is not None:
            return
        ranks = [r.rank for r in state.ranks if r.state in ("starting", "running")]
        if not ranks or not self.ask_where(ranks):
            return
        self.capturing = True
        try:
            deadline = time.time() + PLACE_WAIT_S
            while any(not state.ranks[r].debug.answered() for r in ranks) and time.time() < deadline:
                try:
                    self.sup.handle(self.sup.inbox.get(timeout=max(0.0, deadline - time.time())))
                except queue.Empty:
                    break
        except KeyboardInterrupt:
            pass  # asked twice: stop now, with what came
        finally:
            self.capturing = False

    def annotate(self, error: RunError | None) -> None:
        """The run's error says where each rank was (interrupt, timeout) or that the user quit pdb."""
        state = self.sup.state
        if error is None:
            return
        quit_rank, verb = state.debug.quit_rank, "interrupted" if state.cell is not None else "stopped"
        if quit_rank is not None and isinstance(error, RunInterrupted):
            how = f"stopped in pdb, but {self.no_stdin}" if self.no_stdin else "you quit its debugger (q)"
            error.headline = state.headline = f"rank {quit_rank}: {how}: every rank was {verb}"
        elif isinstance(error, (RunTimeout, RunInterrupted)):
            where = grouped_where_lines(state.ranks) if is_many(len(state.ranks)) else where_lines(state.ranks)
            error.extra += ["", "Where each rank was when the run stopped:", *where]
