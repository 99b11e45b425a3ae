"""broadcast_object, allgather_object (cloudpickled, as in Horovod) and sparse_allreduce_async."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cloudpickle
import torch

from ._allgather import allgather_async, start_gather
from ._basics import check_initialized, control_device
from ._broadcast import broadcast_
from ._ops import Average, resolve_op
from ._process_sets import resolve

__all__ = ["broadcast_object", "allgather_object", "sparse_allreduce_async"]


def broadcast_object(obj: Any, root_rank: int = 0, name: str | None = None, process_set: Any = None) -> Any:
    """Rank ``root_rank``'s object on every rank: its length, then its bytes (two broadcasts)."""
    check_initialized()
    device = control_device()
    root = torch.distributed.get_rank() == root_rank
    payload = bytearray(cloudpickle.dumps(obj)) if root else bytearray()
    sz, t = (None, None) if name is None else (f"{name}.sz", f"{name}.t")
    length = broadcast_(torch.tensor([len(payload)], dtype=torch.int64, device=device), root_rank, sz, process_set)
    if root:
        data = torch.frombuffer(payload, dtype=torch.uint8).to(device)
    else:
        data = torch.empty(int(length[0]), dtype=torch.uint8, device=device)
    broadcast_(data, root_rank, t, process_set)
    return obj if root else cloudpickle.loads(data.cpu().numpy().tobytes())


def allgather_object(obj: Any, name: str | None = None, process_set: Any = None) -> list[Any]:
    """Every rank's object (of ``process_set``), in rank order: one allgather of the pickled bytes."""
    check_initialized()
    payload = bytearray(cloudpickle.dumps(obj))
    data = torch.frombuffer(payload, dtype=torch.uint8).to(control_device())
    parts = start_gather([data], name, process_set, True, "allgather_object",
                         lambda out, dims: [out[0][sum(d[0] for d in dims[:r]):][:dims[r][0]]
                                            for r in range(len(dims))]).wait()
    return [cloudpickle.loads(p.cpu().numpy().tobytes()) for p in parts]


def sparse_allreduce_async(tensor: torch.Tensor, name: str, op: Any, process_set: Any = None) -> Callable[[], Any]:
    """Start reducing a sparse tensor by gathering every rank's indices and values (two allgathers); the returned
    function gives the result: a sparse tensor holding every rank's entries (uncoalesced: duplicates add up),
    the values divided by the set's size for Average."""
    check_initialized()
    reduce_op = resolve_op(op, None)
    size = resolve(process_set, "sparse_allreduce_async").size
    t = tensor.coalesce() if not tensor.is_coalesced() else tensor
    indices = allgather_async(t.indices().transpose(0, 1).contiguous(), name=f"{name}.indices",
                              process_set=process_set)
    values = allgather_async(t.values().contiguous(), name=f"{name}.values", process_set=process_set)

    def result() -> torch.Tensor:
        gathered_values = values.wait()
        gathered_indices = indices.wait()
        if reduce_op == Average:
            gathered_values = gathered_values / size
        return torch.sparse_coo_tensor(gathered_indices.transpose(0, 1), gathered_values, t.size())
    return result
