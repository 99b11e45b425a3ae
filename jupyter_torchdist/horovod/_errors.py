"""The errors this API raises, and the torch.distributed advice for every Horovod feature it does not have.

Unsupported features fail at once with ``HorovodUnsupportedError`` naming the torch.distributed way to do the
same thing, never with a silent approximation. The class is also an ``AttributeError`` so that
``hasattr(hvd, "elastic")`` is simply False and ``getattr(hvd, name, default)`` works.
"""
from __future__ import annotations

__all__ = ["HorovodUnsupportedError", "HorovodNotInitializedError", "HorovodLaunchError", "JoinedRankError",
           "UNSUPPORTED", "unsupported"]


class HorovodUnsupportedError(NotImplementedError, AttributeError):
    """A Horovod feature with no faithful torch.distributed counterpart; the message says what to use instead."""


class HorovodNotInitializedError(ValueError):
    """An API call before ``init()`` (or after ``shutdown()``), like Horovod's ValueError."""


class HorovodLaunchError(RuntimeError):
    """``init()`` found neither a process group nor the environment variables to create one."""


class JoinedRankError(RuntimeError):
    """A collective that Horovod refuses while some rank has called ``join()`` (allgather, broadcast, alltoall)."""


_PROCESS_SETS = ("process sets are not supported: every collective here spans all ranks. For a subset of ranks "
                 "use torch.distributed.new_group(ranks) and pass group= to torch.distributed calls")
_ELASTIC = ("Horovod elastic is not supported. Use torch.distributed.elastic: launch with "
            "`torchrun --nnodes MIN:MAX --max-restarts N ...` and checkpoint/restore your own state")
_MPI = ("MPI is not used: this API runs on torch.distributed (gloo for CPU tensors, NCCL for CUDA tensors); "
        "mpi_enabled() and mpi_built() are False")

UNSUPPORTED: dict[str, str] = {
    "Adasum": "Adasum has no torch.distributed equivalent; use op=hvd.Average",
    "elastic": _ELASTIC,
    "ProcessSet": _PROCESS_SETS,
    "add_process_set": _PROCESS_SETS,
    "remove_process_set": _PROCESS_SETS,
    "mpi_threads_supported": _MPI,
    "start_timeline": "the Horovod timeline is not supported; use torch.profiler.profile (it records collectives)",
    "stop_timeline": "the Horovod timeline is not supported; use torch.profiler.profile (it records collectives)",
    "SyncBatchNorm": "use torch.nn.SyncBatchNorm.convert_sync_batchnorm(model) (it needs CUDA tensors and NCCL)",
    "reducescatter": "use torch.distributed.reduce_scatter_tensor (NCCL; gloo has no reduce-scatter)",
    "reducescatter_async": "use torch.distributed.reduce_scatter_tensor(..., async_op=True) (NCCL)",
    "grouped_reducescatter": "use torch.distributed.reduce_scatter_tensor per tensor (NCCL)",
    "grouped_reducescatter_async": "use torch.distributed.reduce_scatter_tensor per tensor (NCCL)",
    "grouped_allreduce": "call hvd.allreduce on each tensor (or torch.distributed.all_reduce_coalesced)",
    "grouped_allreduce_": "call hvd.allreduce_ on each tensor",
    "grouped_allreduce_async": "call hvd.allreduce_async on each tensor",
    "grouped_allreduce_async_": "call hvd.allreduce_async_ on each tensor",
    "grouped_allgather": "call hvd.allgather on each tensor",
    "grouped_allgather_async": "call hvd.allgather_async on each tensor",
    "sparse_allreduce_async": "pass sparse_as_dense=True to DistributedOptimizer, or allgather indices and values",
    "HorovodInternalError": "failed collectives raise torch.distributed.DistBackendError here",
    "HostsUpdatedInterrupt": _ELASTIC,
    "is_homogeneous": "compare hvd.local_size() across ranks with hvd.allgather_object",
}


def unsupported(name: str, supported: list[str]) -> HorovodUnsupportedError:
    """The error for Horovod name ``name``: the specific advice when we have it, else the list of what exists."""
    advice = UNSUPPORTED.get(name)
    if advice is not None:
        return HorovodUnsupportedError(f"hvd.{name} is not supported by jupyter_torchdist.horovod: {advice}.")
    return HorovodUnsupportedError(
        f"hvd.{name} is not provided by jupyter_torchdist.horovod (a Horovod-compatible API on torch.distributed). "
        f"Supported: {', '.join(sorted(supported))}.")
