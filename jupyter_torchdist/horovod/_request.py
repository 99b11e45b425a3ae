"""What one collective is, in a form every rank can compare: the request a rank proposes to the others.

Horovod matches collectives by name through a coordinator; here each rank proposes its requests in a small control
message (see ``_channel``). A request is reduced to integers: a ``key`` saying which collective it is (the kind and
the user's ``name=``; unnamed requests of a kind match the other ranks' unnamed requests of that kind in order, as
Horovod's generated names do), a ``sig`` digest of everything that must agree across ranks (shapes, dtype, op,
scale factors, root rank, device), what a rank inside ``join()`` needs to take part (the buffer's dtype, element
count, reduction and device) and one per-rank value the others need (an allgather's first dimension).
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["ALLREDUCE", "ALLGATHER", "BROADCAST", "ALLTOALL", "REDUCESCATTER", "BARRIER", "GRADIENTS", "KIND_NAMES",
           "SERVED", "ROW", "Request", "digest", "dtype_code", "dtype_of", "describe"]

ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER, BARRIER, GRADIENTS = 1, 2, 3, 4, 5, 6, 7
KIND_NAMES = {ALLREDUCE: "allreduce", ALLGATHER: "allgather", BROADCAST: "broadcast", ALLTOALL: "alltoall",
              REDUCESCATTER: "reducescatter", BARRIER: "barrier", GRADIENTS: "DistributedOptimizer gradient round"}
SERVED = frozenset({ALLREDUCE, BARRIER, GRADIENTS})  # what a rank inside join() takes part in (Horovod's rule)
ROW = 8  # integers per request in a control message: key, sig, kind, dtype, numel, wire op, flags, aux

_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8, torch.int8, torch.int16,
           torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128)
_CODES = {dtype: i + 1 for i, dtype in enumerate(_DTYPES)}
CUDA_FLAG = 1


def digest(value: Any) -> int:
    """A stable 56-bit digest (Python's hash() differs between processes), positive and within int64."""
    return int.from_bytes(hashlib.blake2b(repr(value).encode(), digest_size=7).digest(), "little")


def dtype_code(dtype: torch.dtype) -> int:
    return _CODES.get(dtype, 0)


def dtype_of(code: int) -> torch.dtype:
    return _DTYPES[code - 1]


def describe(tensor: torch.Tensor) -> str:
    """``float32 [17, 17]`` (``on cuda`` added for CUDA tensors): how an error names one rank's tensor."""
    where = " on cuda" if tensor.is_cuda else ""
    return f"{str(tensor.dtype).replace('torch.', '')} {list(tensor.shape)}{where}"


@dataclass(eq=False)
class Request:
    """One collective as this rank proposes it.

    ``signature``: what must be equal on every rank; ``description``: this rank's side in words, for errors.
    ``wire``: (dtype, element count, index into the wire ops, flags) of the buffer a joined rank contributes zeros
    to (allreduce); ``aux``: a per-rank value the launch needs from every rank (allgather: the first dimension).
    """

    kind: int
    name: str | None
    signature: tuple[Any, ...]
    description: str
    wire: tuple[int, int, int, int] = (0, 0, 0, 0)
    aux: int = 0
    key: int = field(init=False)
    sig: int = field(init=False)

    def __post_init__(self) -> None:
        label = f"{KIND_NAMES[self.kind]}.{'noname' if self.name is None else 'name.' + self.name}"
        self.key = digest(label)
        self.sig = digest((self.kind, self.signature))

    def row(self) -> list[int]:
        return [self.key, self.sig, self.kind, *self.wire, self.aux]

    @property
    def label(self) -> str:
        """``allreduce 'grad.w'`` or ``allreduce`` (unnamed): how errors name the collective."""
        return KIND_NAMES[self.kind] + ("" if self.name is None else f" {self.name!r}")


def wire_fields(tensor: torch.Tensor, wire_op: int = 0) -> tuple[int, int, int, int]:
    """What a rank inside join() needs to contribute zeros to an all_reduce of ``tensor``."""
    return dtype_code(tensor.dtype), tensor.numel(), wire_op, CUDA_FLAG if tensor.is_cuda else 0


def shapes_of(tensors: Sequence[torch.Tensor]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(t.shape) for t in tensors)
