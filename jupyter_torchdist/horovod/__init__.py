"""Horovod's PyTorch API on torch.distributed: change ``import horovod.torch as hvd`` to
``import jupyter_torchdist.horovod as hvd`` and run the script with ``%distribute -n N script.py``,
``python -m jupyter_torchdist -np N python script.py`` (horovodrun's spelling) or
``torchrun --nproc-per-node N script.py``, or a function with ``jupyter_torchdist.horovod.spark.run(fn,
num_proc=N)`` (``horovod.spark.run``: every rank's value, in rank order). No Horovod, MPI or horovodrun is
needed: every call is a torch.distributed collective (gloo for CPU tensors, NCCL for CUDA tensors) on the default
process group or on a process set's group.

Supported, with Horovod's signatures and semantics:

- ``init(process_sets=None)`` (adopts the running process group, or creates one from RANK/WORLD_SIZE/MASTER_ADDR/
  MASTER_PORT; ``init()`` again after ``shutdown()`` works), ``shutdown()``, ``is_initialized()``, ``size()``,
  ``rank()``, ``local_size()``, ``local_rank()``, ``cross_size()``, ``cross_rank()``, ``is_homogeneous()``.
  Calls before ``init()`` raise ValueError, as in Horovod.
- ``allreduce``, ``allreduce_``, ``allreduce_async``, ``allreduce_async_`` and ``grouped_allreduce`` (+ ``_``,
  ``_async``, ``_async_``; one collective for the list) with ops ``Average`` (default), ``Sum``, ``Min``, ``Max``,
  ``Product``, the deprecated ``average=`` flag, ``prescale_factor``/``postscale_factor`` and ``compression=``
  (``Compression.none``, ``Compression.fp16``). Average on integer tensors truncates toward zero.
- ``reducescatter``/``reducescatter_async``/``grouped_reducescatter`` (Average or Sum, scale factors; rank r keeps
  ``d // n`` rows of dim 0, one more when ``r < d % n``, as in Horovod).
- ``allgather``/``allgather_async``/``grouped_allgather`` (first dimensions may differ), ``allgather_object``.
- ``broadcast``, ``broadcast_``, ``broadcast_async``, ``broadcast_async_``, ``broadcast_object``,
  ``broadcast_parameters`` (state_dict, dict, or list/iterable of tensors or (name, tensor) pairs),
  ``broadcast_optimizer_state`` (Horovod's state initialisation included: zero gradients on the trainable
  parameters of an optimizer without state; the parameters themselves are left as they were).
- ``alltoall`` / ``alltoall_async``: returns the received tensor, or ``(tensor, received_splits)`` when ``splits``
  is given (Horovod >= 0.23).
- ``sparse_allreduce_async`` (allgathers indices and values; returns a function giving the result).
- Every collective is differentiable where Horovod's is, with Horovod's gradients, and takes ``name=`` and
  ``process_set=``. Every dtype Horovod supports on CPU works in every collective (uint8, int8, int16, int32,
  int64, float16, bfloat16, float32, float64, bool; gloo lacks int16, which travels as int32 or as bytes, exactly).
- ``synchronize(handle)``, ``poll(handle)``, ``barrier(process_set)``, ``join(device=-1)``: a rank out of data
  joins; the others' allreduces then see zeros from it (an Average still divides by ``size()``), their other
  collectives raise ``JoinedRankError``, and ``join`` returns the last rank to join.
- Process sets: ``ProcessSet(ranks)``, ``add_process_set``, ``remove_process_set`` (every rank calls them, as
  ``torch.distributed.new_group``), ``global_process_set``; a rank outside a set that calls a collective on it gets
  Horovod's ``HorovodInternalError``.
- ``DistributedOptimizer(optimizer, named_parameters, compression, backward_passes_per_step, op,
  gradient_predivide_factor, num_groups, groups, sparse_as_dense, process_set)``: gradients are averaged in ~25 MB
  buckets while backward runs, like DDP, with the same results; sparse gradients are allgathered as Horovod does
  (or reduced dense with ``sparse_as_dense=True``); ``synchronize()``, ``skip_synchronize()``,
  ``_parameter_names``.
- ``SyncBatchNorm`` (torch's ``torch.nn.SyncBatchNorm``), ``HorovodInternalError`` (a RuntimeError: failed or
  refused collectives), ``HostsUpdatedInterrupt`` (exists for code that catches it; never raised),
  ``mpi_enabled()``/``mpi_built()`` (False), ``gloo_enabled()``, ``gloo_built()``, ``nccl_built()``,
  ``cuda_built()``, ``rocm_built()`` (what torch has), ``ddl_built()``/``ccl_built()`` (False).

- Elastic training (``hvd.elastic``: ``run``, ``TorchState``, ``ObjectState``, ``ElasticSampler``, ``commit``,
  ``restore``, ``sync``, ``register_reset_callbacks``) on the run's restarts (``--max-restarts``): a lost rank
  restarts every rank from the last ``state.commit()``, on the same number of ranks (see ``elastic``).

Not supported: each raises ``HorovodUnsupportedError`` (a NotImplementedError) at once, naming the torch way:
``Adasum`` (use ``op=hvd.Average``), the timeline (``start_timeline``: use ``torch.profiler``),
``mpi_threads_supported`` and ``init(comm=...)`` (no MPI).
Any other name Horovod does not have either fails the same way.

Underneath (see ``negotiation``): torch.distributed matches collectives by their order and trusts the shapes, so
before any data moves, the ranks of the set agree on each collective in a small fixed-size all_gather (Horovod does
this through its coordinator). Ranks that call the same collective with different shapes, dtypes, ops, scale
factors or roots raise ``MismatchError`` (a ``HorovodInternalError`` and a ValueError) together, naming each rank's
side, and the group stays usable; ranks that each wait on a collective no other rank waits on raise
``StalledError`` where Horovod would hang; named collectives issued in different orders are matched by name; a
name still in flight on a rank is refused with ValueError there; a rank inside ``join()`` takes part with zeros.
A DistributedOptimizer's step is one such agreement, started with the first gradient and waited for only before
the first bucket goes out. ``JUPYTER_TORCHDIST_HOROVOD_JOIN=0`` (on every rank) skips the agreement: DDP's exact
traffic, without join(), name matching or mismatch checks. Collectives called directly through torch.distributed
bypass it all.
"""
from __future__ import annotations

import importlib
from typing import Any

from torch.nn import SyncBatchNorm

from .basics import (
    ProcessSet,
    add_process_set,
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    global_process_set,
    gloo_built,
    gloo_enabled,
    init,
    is_homogeneous,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    remove_process_set,
    rocm_built,
    shutdown,
    size,
)
from .compression import Compression, Compressor, FP16Compressor, NoneCompressor
from .errors import (
    HorovodInternalError,
    HorovodLaunchError,
    HorovodNotInitializedError,
    HorovodUnsupportedError,
    HostsUpdatedInterrupt,
    JoinedRankError,
    MismatchError,
    StalledError,
    unsupported,
)
from .functions import broadcast_optimizer_state, broadcast_parameters
from .mpi_ops import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    ReduceOp,
    Sum,
    allgather,
    allgather_async,
    allgather_object,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall,
    alltoall_async,
    barrier,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    broadcast_object,
    grouped_allgather,
    grouped_allgather_async,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    grouped_reducescatter,
    grouped_reducescatter_async,
    join,
    reducescatter,
    reducescatter_async,
    sparse_allreduce_async,
)
from .negotiation import Handle, poll, synchronize
from .optimizer import DistributedOptimizer

__all__ = ["init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size",
           "cross_rank", "is_homogeneous", "Average", "Sum", "Min", "Max", "Product", "Adasum", "ReduceOp",
           "Compression", "Compressor", "NoneCompressor", "FP16Compressor", "allreduce", "allreduce_",
           "allreduce_async", "allreduce_async_", "grouped_allreduce", "grouped_allreduce_",
           "grouped_allreduce_async", "grouped_allreduce_async_", "sparse_allreduce_async", "allgather",
           "allgather_async", "grouped_allgather", "grouped_allgather_async", "allgather_object", "broadcast",
           "broadcast_", "broadcast_async", "broadcast_async_", "broadcast_object", "broadcast_parameters",
           "broadcast_optimizer_state", "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
           "grouped_reducescatter", "grouped_reducescatter_async", "synchronize", "poll", "barrier", "join",
           "Handle", "DistributedOptimizer", "SyncBatchNorm", "ProcessSet", "global_process_set", "add_process_set",
           "remove_process_set", "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built",
           "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built", "HorovodInternalError",
           "HostsUpdatedInterrupt", "HorovodUnsupportedError", "HorovodNotInitializedError", "HorovodLaunchError",
           "JoinedRankError", "MismatchError", "StalledError"]


def __getattr__(name: str) -> Any:
    """``spark`` (``horovod.spark``'s ``run``, it needs pyspark only when it runs) and ``elastic``: imported on
    first use. Any other
    Horovod name: a HorovodUnsupportedError saying what to use (it is also an AttributeError)."""
    if name in ("spark", "elastic"):
        return importlib.import_module(f"{__name__}.{name}")
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    raise unsupported(name, __all__)
