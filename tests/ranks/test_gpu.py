"""Real GPUs: NCCL DDP on one GPU per rank. Skipped (with the reason) where torch sees no CUDA device."""
from __future__ import annotations

import pytest
import torch

import jupyter_torchdist as jt
from jupyter_torchdist.core.errors import RunFailed

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason=f"no CUDA GPU visible to torch {torch.__version__} (torch.cuda.is_available() "
                              "is False): the --gpu path cannot run here"),
]


def nccl_ddp(steps: int = 5):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = jt.device()
    model = DDP(torch.nn.Linear(8, 1).to(dev), device_ids=[dev.index])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        x = torch.randn(32, 8, device=dev)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    t = torch.ones(1, device=dev)
    dist.all_reduce(t)
    return {"backend": dist.get_backend(), "device": str(dev), "sum": t.item(),
            "weight": model.module.weight.detach(), "visible": torch.cuda.device_count()}


def cuda_failure():
    import torch

    x = torch.ones(1, device=jt.device())
    raise RuntimeError(f"failed on purpose with a tensor on {x.device}")


def test_one_gpu_rank_trains_with_nccl_and_the_value_comes_back_on_the_cpu(backend):
    value = jt.run(nccl_ddp, n=1, gpu=True, local=backend == "local")
    assert value["backend"] == "nccl" and value["device"] == "cuda:0" and value["sum"] == 1.0
    assert value["visible"] == 1, "each rank sees exactly its own GPU"
    assert value["weight"].device.type == "cpu"


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason=f"needs 2 GPUs, torch sees {torch.cuda.device_count()}")
def test_two_gpu_ranks_allreduce_over_nccl():
    values = jt.run(nccl_ddp, n=2, gpu=True, local=True, all_ranks=True)
    assert [v["sum"] for v in values] == [2.0, 2.0]
    assert torch.equal(values[0]["weight"], values[1]["weight"])


def test_a_failing_gpu_rank_is_reported_and_frees_its_gpu():
    with pytest.raises(RunFailed) as info:
        jt.run(cuda_failure, n=1, gpu=True, local=True)
    assert info.value.rank == 0 and "failed on purpose with a tensor on cuda:0" in info.value.root.summary
    assert jt.run(nccl_ddp, 1, n=1, gpu=True, local=True)["sum"] == 1.0  # the GPU is usable again
