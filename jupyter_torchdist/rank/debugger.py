"""pdb on a rank, answered in the notebook: ``breakpoint()``, ``pdb.set_trace()`` and ``--pdb``'s post-mortem.

The rank's pdb reads and writes the live channel instead of a terminal it does not have: what pdb prints is
kept until it asks for a line, then goes to the kernel with its prompt (a ``PDB`` prompt); the kernel shows it
in the cell and asks the notebook for the line (``input()``, the kernel's stdin channel), and the line comes
back (``PDB_REPLY``) to pdb's ``readline``. Everything else is plain pdb: ``p x``, ``n``, ``s``, ``w``, ``c``,
``q``, in the cell's own line numbers; ``w`` and ``u`` stop at the cell (the machinery that runs it is left
out). Only the thread that called ``breakpoint()`` stops; the rank's sender, reader and sampler threads go on,
so the kernel still hears it and can ask where it is.

``q`` in a ``breakpoint()`` session tells the kernel, which ends the run cleanly (every rank stopped); in a
post-mortem it ends the post-mortem, and the rank then reports its failure as usual.

With ``--pdb`` (``offer_post_mortem``), a rank whose cell raised first offers the kernel its post-mortem and
waits; the kernel takes the offer of the root cause's rank only, and holds the other ranks meanwhile. Kept
ranks remember their last failure, for ``%distribute_debug`` (``post_mortem_saved``).
"""
from __future__ import annotations

import bdb
import os
import pdb
import sys
import time
from types import FrameType, TracebackType
from typing import IO, Any, cast

from ..core import contract as C
from .runtime import current
from .values import summary, user_traceback
from .places import is_library

__all__ = ["RankPdb", "install", "offer_post_mortem", "remember", "post_mortem_saved", "quit_outcome"]


class _Wanted:
    post_mortem = False                       # --pdb for the cell running now
    saved: BaseException | None = None        # kept ranks: the last cell's failure, for %distribute_debug
    looked = False                            # the cell now ending was %distribute_debug's: keep what it showed


_wanted = _Wanted()


def _send(msg: C.PdbMsg) -> bool:
    runtime = current()
    if runtime is None:
        return False
    runtime.client.post(msg, urgent=True)  # behind the output the cell printed before it
    return True


def _ask(text: str, prompt: str, post_mortem: bool) -> str | None:
    """Show ``text`` and ``prompt`` in the notebook; the line the user typed (None: no more input)."""
    runtime = current()
    if runtime is None or not _send({"t": C.PDB, "kind": "prompt", "text": text, "prompt": prompt,
                                     "post_mortem": post_mortem, "at": time.time()}):
        return None
    reply = runtime.link.pdb_reply()
    return None if reply is None else reply.get("line")


class _Console:
    """pdb's stdin and stdout over the channel (pdb writes its prompt, then reads a line)."""

    def __init__(self, owner: RankPdb) -> None:
        self._owner, self._out = owner, []  # type: ignore[var-annotated]

    def write(self, text: str) -> int:
        self._out.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def readline(self) -> str:
        text, prompt = "".join(self._out), self._owner.prompt
        self._out.clear()
        if text.endswith(prompt):
            text = text[:-len(prompt)]
        line = _ask(text, prompt, self._owner.post_mortem)
        return "" if line is None else line + "\n"  # "": pdb reads EOF and quits


class RankPdb(pdb.Pdb):
    """pdb whose console is the notebook (see the module's docstring)."""

    def __init__(self, *, post_mortem: bool = False) -> None:
        console = cast("IO[str]", _Console(self))  # all pdb uses of a file: write, flush, readline
        super().__init__(stdin=console, stdout=console, nosigint=True, readrc=False)
        self.post_mortem = post_mortem
        self.prompt = "(Pdb) "

    def get_stack(self, f: FrameType | None, t: TracebackType | None) -> tuple[list[tuple[FrameType, int]], int]:
        """The stack from the first user frame on: the rank's machinery above the cell is not the user's."""
        stack, index = super().get_stack(f, t)
        first = next((i for i, (frame, _) in enumerate(stack) if not is_library(frame.f_code.co_filename)), 0)
        first = min(first, index)
        return stack[first:], index - first

    def canonic(self, filename: str) -> str:
        """A cell's name ("Cell In[5]") is no path: pdb would make one of it and lose its lines."""
        if filename.startswith("Cell In[") or not os.path.exists(filename):
            return filename
        return str(super().canonic(filename))

    def set_quit(self) -> None:
        """``q`` (or the end of input): the kernel ends the run, or the post-mortem ends."""
        _send({"t": C.PDB, "kind": "end" if self.post_mortem else "quit", "text": "", "at": time.time()})
        super().set_quit()


def _breakpoint(*args: Any, **kwargs: Any) -> None:
    """``sys.breakpointhook`` on a rank: pdb in the notebook, stopping in the caller's frame."""
    if current() is None:
        sys.__breakpointhook__(*args, **kwargs)
        return
    RankPdb().set_trace(sys._getframe().f_back)


def _set_trace(*, header: str | None = None) -> None:
    """``pdb.set_trace()`` on a rank, as ``breakpoint()``."""
    debugger = RankPdb()
    if header is not None:
        debugger.message(header)
    debugger.set_trace(sys._getframe().f_back)


def install() -> None:
    """Route ``breakpoint()`` and ``pdb.set_trace()`` to the notebook (``PYTHONBREAKPOINT=0`` still disables)."""
    if os.environ.get("PYTHONBREAKPOINT") != "0":
        sys.breakpointhook = _breakpoint
    pdb.set_trace = _set_trace


def begin_cell(post_mortem: bool) -> None:
    _wanted.post_mortem = post_mortem


def quit_outcome(outcome: tuple[str, Any]) -> tuple[str, Any]:
    """A cell left by ``q`` in pdb ended on the user's word: an interrupt, not a failure of the cell."""
    return ("interrupted", outcome[1]) if outcome[0] == "error" and isinstance(outcome[1], bdb.BdbQuit) else outcome


def _interact(tb: TracebackType | None) -> None:
    debugger = RankPdb(post_mortem=True)
    debugger.reset()
    debugger.interaction(None, tb)


def offer_post_mortem(exc: BaseException, filename: str) -> None:
    """``--pdb``: offer the kernel this failure's post-mortem; run it here if the kernel takes it."""
    runtime = current()
    if runtime is None or not _wanted.post_mortem or isinstance(exc, (KeyboardInterrupt, bdb.BdbQuit, SystemExit)):
        return
    if not _send({"t": C.PDB, "kind": "offer", "text": summary(exc), "traceback": user_traceback(exc, filename),
                  "at": time.time()}):
        return
    reply = runtime.link.pdb_reply()
    if reply is not None and reply.get("line") == "debug":
        _interact(exc.__traceback__)


def remember(outcome: tuple[str, Any]) -> None:
    """Kept ranks: keep a cell's failure (its frames) for ``%distribute_debug``; a later cell's end replaces it
    (the frames hold tensors: they are not kept past the next cell), except ``%distribute_debug``'s own."""
    if _wanted.looked:
        _wanted.looked = False
        return
    _wanted.saved = outcome[1] if outcome[0] == "error" and isinstance(outcome[1], BaseException) else None


def post_mortem_saved(rank: int) -> None:
    """``%distribute_debug`` on kept ranks: the post-mortem of the last failed cell on ``rank`` (the other ranks
    return at once). The failure stays for another look."""
    runtime = current()
    _wanted.looked = True
    if runtime is None or runtime.rank != rank:
        return
    exc = _wanted.saved
    if exc is None:
        print(f"rank {rank} has no failed cell to debug")
        return
    _interact(exc.__traceback__)
