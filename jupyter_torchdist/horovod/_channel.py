"""One process set's negotiation: every collective is agreed by all its ranks before any data is sent.

torch.distributed matches collectives by their order on each rank and trusts the shapes; a rank that sends
something else hangs or aborts the process (gloo's abort on a size mismatch). Horovod instead negotiates every
collective by name through a coordinator. Here each rank takes part in rounds of a small fixed-size all_gather on
the process set's group (the same size whatever the collective, so rounds always match each other): it proposes its
requests not launched yet, every rank takes the same decision from the same data (``_decide``), and only then is
the data collective issued, by every rank at the same point of its sequence of collectives. So ranks that disagree
raise ``MismatchError`` together and the group stays usable; collectives issued in different orders on different
ranks (Horovod's names) are matched; a rank inside ``join()`` keeps taking part in rounds and contributes zeros.

An async call takes part in one round; if the others are not at the same collective yet, its request stays pending
(in every later round's proposal) and ``synchronize`` waits for it. A DistributedOptimizer starts its round when
backward produces the first gradient and waits for it only when the first bucket is ready (``begin``), so the
round costs no time in a step. ``JUPYTER_TORCHDIST_HOROVOD_JOIN=0`` skips the rounds: data goes out at once, as
DDP's does, with no join(), no name matching and no mismatch checks.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ._decide import (ALL_JOINED, ASYNC, JOINED, LAUNCH, MISMATCH, REFUSED, STALLED, WAITING, Decision, Proposal,
                      decide, decode, encode)
from ._errors import HorovodInternalError, JoinedRankError
from ._layouts import Layouts
from ._handles import PENDING, Handle
from ._request import ALLREDUCE, CUDA_FLAG, GRADIENTS, Request, dtype_of
from ._mismatch import mismatch_error, stalled_error
from ._wire import WIRE_OPS, all_gather_single

__all__ = ["Channel"]

CAPACITY = 8  # candidates per message: the oldest pending requests and the one the round is for


class Channel:
    """The negotiation state of one process set on this rank (its torch group, its pending requests)."""

    def __init__(self, group: Any, ranks: list[int], rank: int, device: torch.device, negotiate: bool) -> None:
        self.group, self.ranks, self.rank, self.size = group, ranks, rank, len(ranks)
        self.device, self.negotiate = device, negotiate
        self.process_set: Any = None  # the hvd.ProcessSet this channel belongs to
        self.prefix = ""  # store prefix of this channel's gradient groups (set by _process_sets)
        self.layouts = Layouts(self)  # DistributedOptimizer layouts agreed by every rank, and their groups
        self.pending: list[Handle] = []
        self._names: dict[int, Handle] = {}
        self._inflight: tuple[Any, torch.Tensor, list[Handle], Handle | None] | None = None
        self._lock = threading.RLock()

    # -- what the collectives call ------------------------------------------------------------------------------
    def submit(self, handle: Handle, wait: bool) -> Handle:
        """Negotiate ``handle``'s collective: launched when every rank agrees; ``wait``: until it is."""
        with self._lock:
            self._claim_name(handle)
            if not self.negotiate:
                handle.launch(None)
                return handle
            self.pending.append(handle)
            self._round(handle, WAITING if wait else ASYNC)
            if wait:
                self.resolve(handle)
        return handle

    def begin(self, handle: Handle) -> None:
        """Start the round for ``handle`` without waiting for it (``resolve`` finishes it)."""
        with self._lock:
            if not self.negotiate:
                handle.launch(None)
                return
            self._finish_inflight()
            self.pending.append(handle)
            candidates = self._candidates(handle)
            out, work = self._gather(WAITING, False, candidates, async_op=True)
            self._inflight = (work, out, candidates, handle)

    def poll(self) -> None:
        """Act on the round started by ``begin`` if it is over, without waiting for it."""
        with self._lock:
            if self._inflight is not None and self._inflight[0].is_completed():
                self._finish_inflight()

    def resolve(self, handle: Handle) -> None:
        """Rounds until ``handle`` is launched or failed (the others reach it, or raise with it)."""
        with self._lock:
            self._finish_inflight()
            while handle.state == PENDING:
                self._round(handle, WAITING)

    def join(self, device: int) -> int:
        """Take part in the others' rounds, contributing zeros, until every rank has joined; the last to join.

        Meanwhile one step of zeros stays posted on every DistributedOptimizer layout group (see ``_layouts``),
        whose steps need no round: the wait for each round polls them.
        """
        with self._lock:
            self._finish_inflight()
            while self.pending:
                self.resolve(self.pending[0])
            fresh = True
            while True:
                self.layouts.post()
                decision = self._round(None, JOINED, fresh, device, idle=self.layouts.post)
                fresh = False
                if decision.kind == ALL_JOINED:
                    self.layouts.flush()
                    return self.ranks[decision.last_joined]

    def close(self, reason: str) -> None:
        """Fail every pending request (``shutdown()``); their ``synchronize`` raises ``reason``."""
        for handle in self.pending:
            handle.fail(HorovodInternalError(reason))
        self.pending.clear()

    # -- rounds -------------------------------------------------------------------------------------------------
    def _claim_name(self, handle: Handle) -> None:
        request = handle.request
        if request.name is None:
            return
        other = self._names.get(request.key)
        if other is not None and not other.finished():
            raise ValueError(f"{request.label} is already in progress on this rank (rank {dist.get_rank()}): a "
                             "name may be used again once its collective is done. Use a different name= or "
                             "synchronize the first one.")
        self._names[request.key] = handle

    def _candidates(self, target: Handle | None) -> list[Handle]:
        candidates = self.pending[:CAPACITY - 1]
        if target is not None and target not in candidates:
            candidates.append(target)
        return candidates

    def _gather(self, status: int, fresh: bool, candidates: list[Handle],
                async_op: bool = False) -> tuple[torch.Tensor, Any]:
        flat = encode(status, fresh, [h.request.row() for h in candidates], CAPACITY)
        mine = torch.tensor(flat, dtype=torch.int64, device=self.device)
        out = mine.new_empty(self.size * len(flat))
        work = all_gather_single(out, mine, group=self.group, async_op=async_op)
        return out, work

    def _finish_inflight(self) -> None:
        if self._inflight is None:
            return
        work, out, candidates, target = self._inflight
        self._inflight = None
        work.wait()
        self._apply(decode(out.tolist(), self.size), WAITING, candidates, target, -1)

    def _round(self, target: Handle | None, status: int, fresh: bool = False, device: int = -1,
               idle: Callable[[], None] | None = None) -> Decision:
        """One round; ``idle`` is called while waiting for the other ranks (inside join())."""
        self._finish_inflight()
        if self._names:  # named collectives completed by now free their names (see Handle.finished)
            self._names = {key: h for key, h in self._names.items() if not h.check_done()}
        candidates = self._candidates(target)
        out, work = self._gather(status, fresh, candidates, async_op=idle is not None)
        if idle is not None:
            while not work.is_completed():
                idle()
                time.sleep(0.0005)
            work.wait()
        return self._apply(decode(out.tolist(), self.size), status, candidates, target, device)

    def _apply(self, proposals: list[Proposal], status: int, candidates: list[Handle], target: Handle | None,
               device: int) -> Decision:
        """Act on the round's decision, the same on every rank."""
        decision = decide(proposals)
        pick = decision.picks[self.rank] if decision.picks else None
        mine = candidates[pick] if pick is not None else None
        if decision.kind == LAUNCH:
            row = next(row for row in decision.rows(proposals) if row is not None)
            if row[2] == GRADIENTS:
                self.layouts.agreed(row[0])
            if mine is None:
                self._serve(row, device)
            else:
                self.pending.remove(mine)
                mine.launch(decision.rows(proposals))
        elif decision.kind == MISMATCH:
            error: BaseException = mismatch_error(self.group, mine.request if mine else None, self.ranks)
            self._fail(mine, error)
        elif decision.kind == REFUSED and mine is not None:
            self._fail(mine, JoinedRankError(_refusal(mine.request, len(decision.joined))))
        elif decision.kind == STALLED:
            waiting = target if status == WAITING else None
            error = stalled_error(self.group, waiting.request if waiting else None, self.ranks)
            self._fail(waiting, error)
        return decision

    def _fail(self, handle: Handle | None, error: BaseException) -> None:
        if handle is None:
            return
        if handle in self.pending:
            self.pending.remove(handle)
        handle.fail(error)

    def _serve(self, row: list[int], device: int) -> None:
        """Inside join(): take part in the collective the active ranks launch (zeros), or in nothing."""
        kind, dtype, numel, wire_op, flags = row[2:7]
        if kind == ALLREDUCE:
            where = torch.device("cpu")
            if flags & CUDA_FLAG:
                where = torch.device("cuda", device if device >= 0 else torch.cuda.current_device())
            zeros = torch.zeros(numel, dtype=dtype_of(dtype), device=where)
            dist.all_reduce(zeros, op=WIRE_OPS[wire_op], group=self.group)
        elif kind == GRADIENTS:
            self.layouts.replay(row[0], device)
            self.layouts.post()


def _refusal(request: Request, joined: int) -> str:
    hint = " Specify sparse_as_dense=True if using DistributedOptimizer." if request.label.startswith("allgather") \
        else ""
    return (f"{request.label} is not supported while a rank has called hvd.join() ({joined} joined), as in "
            f"Horovod: only allreduce and barrier are.{hint}")

