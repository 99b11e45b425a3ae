"""The join protocol: how a rank that called ``join()`` keeps serving the other ranks' allreduces.

Horovod negotiates every collective through a coordinator, so a joined rank learns each allreduce the others
start and contributes a zero tensor. torch.distributed has no coordinator, so every collective issued through
this API is preceded by a tiny control all_reduce (SUM of 8 int64) on the default group:

    [1, kind, dtype, numel, wire op, on CUDA, c, c*c]   from each active rank (c: broadcast's root, else 0)
    [0, 0, 0, 0, 0, 0, 0, 0]                            from each rank inside join()

Every rank sees the sum: element 0 is the number of active ranks and the rest, divided by it, describe the
collective (n * sum(c*c) == sum(c)**2 exactly when every rank gave the same root, which catches mismatched roots
that would otherwise hang). A rank inside ``join()`` loops on control messages: for an allreduce it contributes
zeros of the described dtype and size (so an Average still divides by the full size, as in Horovod); for an allgather,
broadcast or alltoall the active ranks raise (Horovod refuses those while a rank has joined) and it does
nothing; when the count reaches 0 every rank has joined and all leave ``join()`` together.

Active ranks do not wait for the control message of an allreduce: it is queued just before the data on the same
group, so the cost is one small asynchronous all_reduce per allreduce. A DistributedOptimizer announces a whole
round of gradient buckets with one message (kind GRADIENTS, naming the optimizer by the order every rank created
it in; a joined rank replays that optimizer's buckets with zeros), so the cost per training step is one tiny
all_reduce whatever the number of buckets. Setting JUPYTER_TORCHDIST_HOROVOD_JOIN=0 on every rank drops it (the
traffic is then DDP's) and makes ``join()`` raise.
Collectives issued directly through torch.distributed bypass the protocol and hang if a rank has joined.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
import torch.distributed as dist

from ._basics import JOIN_ENV, check_initialized, control_device, join_protocol
from ._errors import JoinedRankError

__all__ = ["ALLREDUCE", "ALLGATHER", "BROADCAST", "ALLTOALL", "BARRIER", "GRADIENTS", "WIRE_OPS", "announce",
           "announce_round", "register_round", "require_all", "join"]

ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, BARRIER, GRADIENTS = 1, 2, 3, 4, 5, 6
_NAMES = {ALLGATHER: "allgather", BROADCAST: "broadcast", ALLTOALL: "alltoall"}
WIRE_OPS = (dist.ReduceOp.SUM, dist.ReduceOp.MIN, dist.ReduceOp.MAX, dist.ReduceOp.PRODUCT)
_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8, torch.int8, torch.int16,
           torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128)
_DTYPE_CODE = {dtype: i for i, dtype in enumerate(_DTYPES)}


_LENGTH = 8


def _message(kind: int, tensor: torch.Tensor | None, wire_op: int, check: int = 0) -> torch.Tensor:
    fields = [1, kind, 0, 0, wire_op, 0, check, check * check]
    if tensor is not None:
        fields[2:4], fields[5] = [_DTYPE_CODE.get(tensor.dtype, 0), tensor.numel()], int(tensor.is_cuda)
    return torch.tensor(fields, dtype=torch.int64, device=control_device())


_rounds: list[weakref.WeakMethod[Callable[[], None]]] = []


def register_round(replay: Callable[[], None]) -> int:
    """A DistributedOptimizer's round of buckets: its id (every rank creates its optimizers in the same order),
    and how a joined rank takes part in one round (zeros for every bucket)."""
    _rounds.append(weakref.WeakMethod(replay))
    return len(_rounds) - 1


def announce_round(round_id: int) -> dist.Work:
    """Queue the control message for a round of gradient buckets (the caller need not wait)."""
    work = dist.all_reduce(_message(GRADIENTS, None, 0, round_id), async_op=True)
    assert work is not None
    return work


def announce(tensor: torch.Tensor, wire_op: int) -> dist.Work:
    """Queue the control message for an allreduce of ``tensor`` (index into WIRE_OPS); the caller need not wait."""
    work = dist.all_reduce(_message(ALLREDUCE, tensor, wire_op), async_op=True)
    assert work is not None
    return work


def require_all(kind: int, tensor: torch.Tensor | None = None, root: int = 0) -> None:
    """Control message for a collective Horovod refuses after a join: raise on every active rank if one joined.

    For a broadcast, also raise on every rank when the ranks named different roots.
    """
    message = _message(kind, tensor, 0, root)
    dist.all_reduce(message)
    active, roots, squares = (int(v) for v in message[[0, 6, 7]].tolist())
    if active * squares != roots * roots:
        raise ValueError("Mismatched broadcast root ranks: the ranks named different root_rank values.")
    if kind != BARRIER and active < dist.get_world_size():
        hint = " Specify sparse_as_dense=True if using DistributedOptimizer." if kind == ALLGATHER else ""
        raise JoinedRankError(f"{_NAMES[kind]} is not supported while a rank has called hvd.join() "
                              f"({dist.get_world_size() - active} joined), as in Horovod.{hint}")


def _replay_round(active: int, ids: int, squares: int) -> None:
    replay = _rounds[ids // active]() if active * squares == ids * ids and 0 <= ids // active < len(_rounds) else None
    if replay is None:
        raise RuntimeError("hvd.join(): the other ranks reduce the gradients of a DistributedOptimizer this rank "
                           "does not have; create the same optimizers on every rank, in the same order")
    replay()


def _serve(message: torch.Tensor, device: int) -> None:
    """Inside join(): contribute zeros to the allreduce(s) the active ranks announced; ignore other kinds."""
    active = int(message[0])
    kind, dtype, numel, wire_op, cuda = (int(v) // active for v in message[1:6].tolist())
    if kind == GRADIENTS:
        _replay_round(active, int(message[6]), int(message[7]))
        return
    if kind != ALLREDUCE:
        return
    where = torch.device("cpu")
    if cuda:
        where = torch.device("cuda", device if device >= 0 else torch.cuda.current_device())
    dist.all_reduce(torch.zeros(numel, dtype=_DTYPES[dtype], device=where), op=WIRE_OPS[wire_op])


def join(device: int = -1) -> int:
    """This rank is out of data: serve the others' allreduces with zeros until every rank has joined.

    ``device`` is the CUDA device for the zero tensors when the others reduce CUDA tensors (-1: the current one).
    Returns the rank that joined last (the highest such rank when several joined in the same round).
    """
    check_initialized()
    if not join_protocol():
        raise RuntimeError(f"hvd.join() needs the join protocol, which {JOIN_ENV}=0 turned off on this rank; "
                           "unset it on every rank (or give each rank the same amount of data).")
    served = 0
    while True:
        message = torch.zeros(_LENGTH, dtype=torch.int64, device=control_device())
        dist.all_reduce(message)
        if int(message[0]) == 0:
            break
        served += 1
        _serve(message, device)
    last = torch.tensor([dist.get_rank() if served == 0 else -1], dtype=torch.int64, device=control_device())
    dist.all_reduce(last, op=dist.ReduceOp.MAX)
    return int(last[0])
