"""jupyter_torchdist.horovod without a process group: refusals before init, init without a launcher, what stays
unsupported, the exception classes, the negotiation's decision rule, the request keys and the dtype carriage."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import jupyter_torchdist.horovod as hvd
from jupyter_torchdist.horovod import negotiation as d
from jupyter_torchdist.horovod.negotiation import ALLGATHER, ALLREDUCE, BARRIER, BROADCAST, GRADIENTS, Request, digest
from jupyter_torchdist.horovod.negotiation import for_reduction, movable, reduce_dtype


def test_before_init_every_call_says_to_init():
    assert not hvd.is_initialized()
    for call in (hvd.size, hvd.rank, hvd.local_rank, hvd.cross_size, hvd.barrier, lambda: hvd.join(),
                 lambda: hvd.allreduce(torch.ones(1)), lambda: hvd.allgather(torch.ones(1)),
                 lambda: hvd.reducescatter(torch.ones(2)), lambda: hvd.grouped_allreduce([torch.ones(1)]),
                 lambda: hvd.add_process_set([0]), lambda: hvd.broadcast_parameters({}, 0),
                 lambda: hvd.broadcast_object(1),
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
    ("start_timeline", "torch.profiler"),
    ("stop_timeline", "export_chrome_trace"), ("no_such_thing", "Supported: Adasum, Average"),
])
def test_what_stays_unsupported_fails_at_once_with_the_torch_way(name, advice):
    with pytest.raises(hvd.HorovodUnsupportedError) as info:
        getattr(hvd, name)
    assert isinstance(info.value, NotImplementedError) and advice in str(info.value)
    assert not hasattr(hvd, name)  # also an AttributeError: hasattr and getattr(..., default) behave


def test_the_whole_api_exists():
    for name in ("reducescatter", "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async",
                 "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
                 "grouped_allgather", "grouped_allgather_async", "sparse_allreduce_async", "add_process_set",
                 "remove_process_set", "ProcessSet", "global_process_set", "is_homogeneous"):
        assert callable(getattr(hvd, name)) or name == "global_process_set", name
    assert hvd.SyncBatchNorm is torch.nn.SyncBatchNorm
    assert issubclass(hvd.HorovodInternalError, RuntimeError) and issubclass(hvd.HostsUpdatedInterrupt, RuntimeError)
    assert hvd.HostsUpdatedInterrupt(skip_sync=True).skip_sync is True
    assert issubclass(hvd.MismatchError, hvd.HorovodInternalError) and issubclass(hvd.MismatchError, ValueError)
    assert issubclass(hvd.JoinedRankError, hvd.HorovodInternalError)


def test_process_set_objects_before_registration():
    ps = hvd.ProcessSet([2, 0])
    assert ps.ranks == [0, 2] and ps.process_set_id is None and ps.size() is None and ps.rank() is None
    assert hvd.global_process_set.process_set_id == 0
    with pytest.raises(ValueError, match="list of process ranks"):
        hvd.ProcessSet([0, "1"])
    with pytest.raises(hvd.HorovodUnsupportedError, match="MPI"):
        hvd.ProcessSet(object())


def test_elastic_state_commit_and_restore_in_memory_outside_a_run():
    """Outside a run with restarts a commit is Horovod's in-memory copy: restore() rolls back to it."""
    from jupyter_torchdist.horovod import elastic

    assert hvd.elastic is elastic and callable(elastic.run)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sampler = elastic.ElasticSampler(list(range(10)), shuffle=False)
    state = elastic.TorchState(model, opt, train_sampler=sampler, epoch=0, batch=0)
    assert state.train_sampler is sampler and state.model is model
    committed = {k: v.clone() for k, v in model.state_dict().items()}
    state.epoch, state.batch = 1, 3
    sampler.record_indices([0, 1])
    state.save()
    with torch.no_grad():
        model.weight.add_(1.0)
    state.epoch, state.batch = 5, 9
    state.restore()
    assert (state.epoch, state.batch) == (1, 3)
    assert all(torch.equal(committed[k], v) for k, v in model.state_dict().items())
    assert sampler.state_dict() == {"epoch": 0, "processed_indices": {0, 1}}
    plain = elastic.ObjectState(epoch=2)
    plain.commit()  # no run: in memory only, never a HostsUpdatedInterrupt
    plain.epoch = 7
    plain.restore()
    assert plain.epoch == 2


def test_elastic_sampler_resumes_an_epoch_in_the_uninterrupted_order():
    from jupyter_torchdist.horovod.elastic import ElasticSampler

    sampler = ElasticSampler(list(range(12)), shuffle=True, seed=4)
    whole = list(sampler)
    assert sorted(whole) == list(range(12)) and len(sampler) == 12
    sampler.record_batch(0, 5)
    assert sampler.get_indices(0, 5) == whole[:5]
    resumed = ElasticSampler(list(range(12)), shuffle=True, seed=4)
    resumed.load_state_dict(sampler.state_dict())
    assert list(resumed) == whole[5:] and len(resumed) == 7
    resumed.set_epoch(1)
    assert len(resumed) == 12 and list(resumed) != whole  # a new epoch: everything, reshuffled


def test_elastic_run_wants_the_state_first():
    from jupyter_torchdist.horovod import elastic

    with pytest.raises(TypeError, match="TorchState or ObjectState"):
        elastic.run(lambda state: None)(3)


def test_build_queries():
    assert hvd.Adasum == 2 and hvd.Average == 0  # the names exist (Horovod code picks ops at import time)
    with pytest.raises(hvd.HorovodUnsupportedError, match="MPI is not used"):
        hvd.mpi_threads_supported()
    assert (hvd.mpi_built(), hvd.mpi_enabled(), hvd.ddl_built(), hvd.ccl_built()) == (False,) * 4
    assert hvd.gloo_built() is True and hvd.gloo_enabled() is False  # no group in this process
    assert bool(hvd.nccl_built()) == (torch.distributed.is_nccl_available() and torch.cuda.is_available())
    assert hvd.cuda_built() == (torch.version.cuda is not None) and hvd.rocm_built() == (torch.version.hip is not None)


# -- the negotiation's decision (the same on every rank, from the same round) ------------------------------------
def _row(kind: int, name: str | None, signature: tuple, numel: int = 4) -> list[int]:
    return Request(kind, name, signature, "", (1, numel, 0, 0), aux=numel).row()


A, A2 = _row(ALLREDUCE, "a", ((4,),)), _row(ALLREDUCE, "a", ((5,),))
B, BAR = _row(ALLREDUCE, "b", ((4,),)), _row(BARRIER, None, ())
U, G = _row(ALLREDUCE, None, ((4,),)), _row(ALLGATHER, None, ((3,),))


def _decide(*proposals: tuple[int, list[list[int]]], fresh: tuple[int, ...] = ()) -> d.Decision:
    flat = [v for r, (status, rows) in enumerate(proposals) for v in d.encode(status, r in fresh, rows, 8)]
    return d.decide(d.decode(flat, len(proposals)))


def test_the_same_request_everywhere_launches_and_the_lowest_ranks_order_wins():
    assert _decide((d.WAITING, [A]), (d.ASYNC, [A])).kind == d.LAUNCH
    decision = _decide((d.WAITING, [B, A]), (d.WAITING, [A, B]))
    assert (decision.kind, decision.key, decision.picks) == (d.LAUNCH, B[0], [0, 1])
    decision = _decide((d.WAITING, [A, BAR]), (d.WAITING, [BAR]))  # a pending request waits for the others
    assert (decision.kind, decision.key, decision.picks) == (d.LAUNCH, BAR[0], [1, 0])
    assert _decide((d.WAITING, [U]), (d.ASYNC, [G, U])).key == U[0]  # unnamed: matched per kind, in order


def test_a_different_signature_is_a_mismatch_and_disagreement_is_not():
    assert _decide((d.WAITING, [A]), (d.WAITING, [A2])).kind == d.MISMATCH
    assert _decide((d.WAITING, [U]), (d.ASYNC, [G])).kind == d.NONE  # the async one waits for a later round
    assert _decide((d.WAITING, [A]), (d.WAITING, [B])).kind == d.STALLED  # Horovod would hang
    assert _decide((d.WAITING, [U]), (d.WAITING, [G])).kind == d.STALLED


def test_joined_ranks_serve_allreduces_and_gradients_and_refuse_the_rest():
    grads = _row(GRADIENTS, "layout", ((3,),))
    for row in (A, BAR, grads):
        decision = _decide((d.JOINED, []), (d.WAITING, [row]))
        assert (decision.kind, decision.joined, decision.picks) == (d.LAUNCH, [0], [None, 0])
    bcast = _row(BROADCAST, "x", ((4,), 1))
    assert _decide((d.WAITING, [bcast]), (d.JOINED, [])).kind == d.REFUSED
    assert _decide((d.WAITING, [G]), (d.JOINED, []), (d.WAITING, [G])).kind == d.REFUSED
    several_dtypes = Request(ALLREDUCE, None, ("mixed",), "", (0, 0, 0, 0)).row()
    assert _decide((d.JOINED, []), (d.WAITING, [several_dtypes])).kind == d.REFUSED
    done = _decide((d.JOINED, []), (d.JOINED, []), (d.JOINED, []), fresh=(0, 2))
    assert (done.kind, done.last_joined) == (d.ALL_JOINED, 2)


@pytest.mark.slow  # seconds: fresh processes
def test_keys_name_the_collective_and_are_stable_across_processes():
    assert Request(ALLREDUCE, "x", (), "").key != Request(ALLGATHER, "x", (), "").key  # Horovod: per-kind names
    assert Request(ALLREDUCE, None, (), "").key != Request(ALLREDUCE, "x", (), "").key
    assert Request(ALLREDUCE, "x", (1,), "").sig != Request(ALLREDUCE, "x", (2,), "").sig
    code = "from jupyter_torchdist.horovod.negotiation import digest; print(digest(('allreduce', 'x')))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert int(other) == digest(("allreduce", "x")) < 2 ** 63  # not Python's per-process hash()


# -- every dtype through gloo ------------------------------------------------------------------------------------
def test_int16_travels_exactly():
    every = torch.arange(-2 ** 15, 2 ** 15, dtype=torch.int32).to(torch.int16)
    moved = movable(every)
    assert moved.dtype == torch.float16 and moved.data_ptr() == every.data_ptr()
    assert torch.equal(moved.clone().view(torch.int16), every)  # a copy of the bytes gives every value back
    wide = for_reduction(every)
    assert wide.dtype == torch.int32 == reduce_dtype(torch.int16) and torch.equal(wide.to(torch.int16), every)
    assert (wide * 3).to(torch.int16).tolist() == (every * 3).tolist()  # int16's own wrap-around
    for dtype in (torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
                  torch.float64, torch.bool):
        t = torch.zeros(3, dtype=dtype)
        assert movable(t) is t and for_reduction(t) is t and reduce_dtype(dtype) == dtype
