"""jupyter_torchdist.horovod without a process group: refusals before init, init without a launcher, the
unsupported names with the torch way, the elastic import and the build queries."""
from __future__ import annotations

import pytest
import torch

import jupyter_torchdist.horovod as hvd


def test_before_init_every_call_says_to_init():
    assert not hvd.is_initialized()
    for call in (hvd.size, hvd.rank, hvd.local_rank, hvd.cross_size, hvd.barrier, lambda: hvd.join(),
                 lambda: hvd.allreduce(torch.ones(1)), lambda: hvd.allgather(torch.ones(1)),
                 lambda: hvd.broadcast_parameters({}, 0), lambda: hvd.broadcast_object(1),
                 lambda: hvd.DistributedOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))]))):
        with pytest.raises(ValueError, match=r"Horovod has not been initialized; use hvd.init\(\)"):
            call()


def test_init_without_a_launcher_says_how_to_launch(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(hvd.HorovodLaunchError) as info:
        hvd.init()
    message = str(info.value)
    assert "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT not set" in message
    assert "%%distribute" in message and "python -m jupyter_torchdist -n N" in message and "torchrun" in message
    assert not hvd.is_initialized()


@pytest.mark.parametrize("name, advice", [
    ("elastic", "torchrun --nnodes MIN:MAX"), ("add_process_set", "torch.distributed.new_group(ranks)"),
    ("ProcessSet", "torch.distributed.new_group(ranks)"), ("remove_process_set", "new_group"),
    ("SyncBatchNorm", "torch.nn.SyncBatchNorm"), ("start_timeline", "torch.profiler"),
    ("reducescatter", "reduce_scatter_tensor"), ("grouped_allreduce", "hvd.allreduce"),
    ("no_such_thing", "Supported: Adasum, Average"),
])
def test_unsupported_names_fail_at_once_with_the_torch_way(name, advice):
    with pytest.raises(hvd.HorovodUnsupportedError) as info:
        getattr(hvd, name)
    assert isinstance(info.value, NotImplementedError) and advice in str(info.value)
    assert not hasattr(hvd, name)  # also an AttributeError: hasattr and getattr(..., default) behave


def test_elastic_import_and_build_queries():
    with pytest.raises(hvd.HorovodUnsupportedError, match="torchrun --nnodes MIN:MAX"):
        from jupyter_torchdist.horovod import elastic  # noqa: F401
    with pytest.raises(hvd.HorovodUnsupportedError, match="torch.distributed.elastic"):
        import jupyter_torchdist.horovod.elastic  # noqa: F401
    assert hvd.Adasum == 2 and hvd.Average == 0  # the names exist (Horovod code picks ops at import time)
    with pytest.raises(hvd.HorovodUnsupportedError, match="MPI is not used"):
        hvd.mpi_threads_supported()
    with pytest.raises(hvd.HorovodUnsupportedError, match="process sets"):
        hvd.init(process_sets=[[0, 1]])
    assert (hvd.mpi_built(), hvd.mpi_enabled(), hvd.ddl_built(), hvd.ccl_built()) == (False,) * 4
    assert hvd.gloo_built() is True and hvd.gloo_enabled() is False  # no group in this process
    assert hvd.nccl_built() == torch.distributed.is_nccl_available()
    assert hvd.cuda_built() == (torch.version.cuda is not None) and hvd.rocm_built() == (torch.version.hip is not None)
