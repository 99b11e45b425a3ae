"""Horovod's PyTorch API on torch.distributed: change ``import horovod.torch as hvd`` to
``import jupyter_torchdist.horovod as hvd`` and run the script with ``%distribute -n N script.py``,
``python -m jupyter_torchdist -np N python script.py`` (horovodrun's spelling) or
``torchrun --nproc-per-node N script.py``, or a function with ``jupyter_torchdist.horovod.spark.run(fn,
num_proc=N)`` (``horovod.spark.run``: every rank's value, in rank order). No Horovod, MPI or horovodrun is
needed: every call is a torch.distributed collective on the default process group (gloo for CPU tensors, NCCL
for CUDA tensors).

Supported, with Horovod's signatures and semantics:

- ``init()`` (adopts the running process group, or creates one from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT),
  ``shutdown()``, ``is_initialized()``, ``size()``, ``rank()``, ``local_size()``, ``local_rank()``,
  ``cross_size()``, ``cross_rank()``. Calls before ``init()`` raise ValueError, as in Horovod.
- ``allreduce``, ``allreduce_``, ``allreduce_async``, ``allreduce_async_`` with ops ``Average`` (default), ``Sum``,
  ``Min``, ``Max``, ``Product``, the deprecated ``average=`` flag, ``prescale_factor``/``postscale_factor`` and
  ``compression=`` (``Compression.none``, ``Compression.fp16``). Average on integer tensors truncates toward zero.
- ``allgather`` / ``allgather_async`` (first dimensions may differ), ``allgather_object``.
- ``broadcast``, ``broadcast_``, ``broadcast_async``, ``broadcast_async_``, ``broadcast_object``,
  ``broadcast_parameters`` (state_dict, dict, or list/iterable of tensors or (name, tensor) pairs),
  ``broadcast_optimizer_state`` (also when the other ranks have no optimizer state yet).
- ``alltoall`` / ``alltoall_async``: returns the received tensor, or ``(tensor, received_splits)`` when ``splits``
  is given (Horovod >= 0.23).
- ``allreduce``, ``allgather``, ``broadcast`` and ``alltoall`` are differentiable, with Horovod's gradients.
- ``synchronize(handle)``, ``poll(handle)``, ``barrier()``, ``join(device=-1)``: a rank out of data joins; the
  others' allreduces then see zeros from it (an Average still divides by ``size()``), allgather, broadcast and
  alltoall raise while any rank has joined, and ``join`` returns the last rank to join.
- ``DistributedOptimizer(optimizer, named_parameters, compression, backward_passes_per_step, op,
  gradient_predivide_factor, num_groups, groups, sparse_as_dense)``: gradients are averaged in ~25 MB buckets
  while backward runs, like DDP, with the same results; ``synchronize()``, ``skip_synchronize()``.
- ``global_process_set`` (accepted as ``process_set=``), ``mpi_enabled()``/``mpi_built()`` (False),
  ``gloo_enabled()``, ``gloo_built()``, ``nccl_built()``, ``cuda_built()``, ``rocm_built()`` (what torch has),
  ``ddl_built()``/``ccl_built()`` (False).

Not supported: each raises ``HorovodUnsupportedError`` (a NotImplementedError) at once, naming the torch way:
``Adasum`` (use ``op=hvd.Average``), elastic training (``hvd.elastic``: use ``torchrun --nnodes MIN:MAX``),
process sets (``add_process_set``, ``ProcessSet``, ``process_set=`` other than the global set: use
``torch.distributed.new_group(ranks)``), ``mpi_threads_supported``, ``init(comm=...)``, the timeline (use
``torch.profiler``), ``SyncBatchNorm`` (use ``torch.nn.SyncBatchNorm``), ``reducescatter`` and the ``grouped_*``
calls, and sparse gradients without ``sparse_as_dense=True``. Any other Horovod name fails the same way.

How it differs underneath: a rank inside ``join()`` learns of the others' allreduces from a tiny control
all_reduce issued before each collective (see ``_control``); collectives called directly through
torch.distributed bypass it. For a tiny, latency-bound model that message can cost up to ~25% of a step on gloo;
``JUPYTER_TORCHDIST_HOROVOD_JOIN=0`` (on every rank) turns it off, and ``join()`` with it. ``name=`` arguments
are accepted and unused (torch.distributed matches collectives by order, so every rank must issue them in the
same order, as with DDP).
"""
from __future__ import annotations

import importlib
from typing import Any

from ._basics import (ProcessSetAll, ccl_built, cross_rank, cross_size, cuda_built, ddl_built, global_process_set,
                      gloo_built, gloo_enabled, init, is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
                      mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size)
from ._collectives import (allgather, allgather_async, allgather_object, alltoall, alltoall_async, broadcast,
                           broadcast_, broadcast_async, broadcast_async_, broadcast_object)
from ._compression import Compression, Compressor, FP16Compressor, NoneCompressor
from ._control import join
from ._errors import (HorovodLaunchError, HorovodNotInitializedError, HorovodUnsupportedError, JoinedRankError,
                      unsupported)
from ._functions import broadcast_optimizer_state, broadcast_parameters
from ._ops import (Adasum, Average, Handle, Max, Min, Product, ReduceOp, Sum, allreduce, allreduce_, allreduce_async,
                   allreduce_async_, barrier, poll, synchronize)
from ._optimizer import DistributedOptimizer

__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size", "cross_rank",
    "Average", "Sum", "Min", "Max", "Product", "Adasum", "ReduceOp", "Compression", "Compressor", "NoneCompressor",
    "FP16Compressor", "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "allgather",
    "allgather_async", "allgather_object", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "broadcast_object", "broadcast_parameters", "broadcast_optimizer_state", "alltoall", "alltoall_async",
    "synchronize", "poll", "barrier", "join", "Handle", "DistributedOptimizer", "global_process_set",
    "ProcessSetAll", "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built",
    "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built", "HorovodUnsupportedError",
    "HorovodNotInitializedError", "HorovodLaunchError", "JoinedRankError",
]


def __getattr__(name: str) -> Any:
    """``spark``: ``horovod.spark``'s ``run``, imported on first use (it needs pyspark only when it runs). Any other
    Horovod name: a HorovodUnsupportedError saying what to use (it is also an AttributeError)."""
    if name == "spark":
        return importlib.import_module(f"{__name__}.spark")
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    raise unsupported(name, __all__)
