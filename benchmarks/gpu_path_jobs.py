"""What benchmarks/gpu_check.py runs on a rank for the GPU paths of issue 49 (shipped by value, like gpu_jobs):
the default group's backends with a CPU and a CUDA tensor through it, Horovod's CPU tensors beside CUDA ones,
DeepSpeed's ZeRO on the rank's GPU, a loop for ``--profile`` and the layout a TorchDistributor function sees. On the
CPU (``gpu_check.py --dry-run``) the same code runs with the rank's device being the CPU."""
from __future__ import annotations

import os
from typing import Any


def _device() -> Any:
    import jupyter_torchdist as jt

    return jt.device()


def backends() -> dict[str, Any]:
    """The default group as user code sees it, and one CPU tensor, one tensor on the rank's device and one object
    through it (an NCCL-only group refuses the CPU tensor)."""
    import torch
    import torch.distributed as dist

    dev = _device()
    cpu = torch.tensor([1.0])
    dist.all_reduce(cpu)
    on_device = torch.ones(2, device=dev)
    dist.all_reduce(on_device)
    objects: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(objects, {"rank": dist.get_rank()})
    return {"backend": str(dist.get_backend()), "config": str(dist.get_backend_config()), "cpu_sum": cpu.item(),
            "device_sum": on_device[0].item(), "device": str(on_device.device), "objects": objects,
            "order": os.environ.get("CUDA_DEVICE_ORDER"), "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}


def horovod_mixed() -> dict[str, Any]:
    """Horovod's MNIST ``metric_average`` (a CPU tensor) beside collectives of tensors on the rank's device."""
    import torch

    import jupyter_torchdist.horovod as hvd

    hvd.init()
    dev = _device()

    def metric_average(val: float, name: str) -> float:  # as Horovod's pytorch_mnist.py writes it
        tensor = torch.tensor(val)
        avg_tensor = hvd.allreduce(tensor, name=name)
        return float(avg_tensor.item())

    average = metric_average(float(hvd.rank() + 1), "avg_loss")
    on_device = hvd.allreduce(torch.ones(3, device=dev), op=hvd.Sum)
    gathered = hvd.allgather(torch.full((1,), float(hvd.rank()), device=dev))
    gathered_cpu = hvd.allgather(torch.tensor([float(hvd.rank())]))
    sent = hvd.broadcast(torch.tensor([7.0 if hvd.rank() == 0 else 0.0]), root_rank=0, name="cpu_broadcast")
    return {"average": average, "device_sum": on_device[0].item(), "device": str(on_device.device),
            "gathered": gathered.tolist(), "gathered_device": str(gathered.device),
            "gathered_cpu": gathered_cpu.tolist(),
            "broadcast": sent.item(), "size": hvd.size()}


def deepspeed_fit(steps: int = 8) -> dict[str, Any]:
    """DeepSpeed's ZeRO stage 2 on the rank's device (torch's Adam: nothing compiled), a few steps of a small
    regression; its loss must fall."""
    import deepspeed  # type: ignore[import-untyped]
    import torch

    dev = _device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    config = {"train_batch_size": 32, "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "torch_adam": True}},
              "zero_optimization": {"stage": 2}}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(32, 16, generator=g).to(engine.device)
        loss = torch.nn.functional.mse_loss(engine(x), x[:, :4].sum(1, keepdim=True))
        engine.backward(loss)
        engine.step()
        losses.append(float(loss.item()))
    return {"device": str(engine.device), "rank_device": str(dev), "first_loss": losses[0], "last_loss": losses[-1]}


def profiled_loop(steps: int = 8) -> dict[str, Any]:
    """A loop of matrix products on the rank's device that reports each step (what ``--profile`` windows)."""
    import torch

    import jupyter_torchdist as jt

    dev = _device()
    a = torch.randn(1024, 1024, device=dev)
    for step in range(1, steps + 1):
        b = a @ a
        if dev.type == "cuda":
            torch.cuda.synchronize()
        jt.report(step=step, total=steps, loss=float(b[0, 0].item()))
    return {"device": str(dev), "steps": steps}


def distributor_layout() -> dict[str, Any]:
    """What a TorchDistributor function sees (run by the class, so the group is already up): its LOCAL_RANK, its
    CUDA_VISIBLE_DEVICES, the device cuda:0 is, and an all_reduce there."""
    import torch
    import torch.distributed as dist

    gpu = torch.cuda.is_available()
    dev = torch.device("cuda", 0) if gpu else torch.device("cpu")
    t = torch.ones(1, device=dev)
    dist.all_reduce(t)
    return {"local_rank": int(os.environ["LOCAL_RANK"]), "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "node_rank": int(os.environ.get("GROUP_RANK", "0")), "sum": t.item(),
            "uuid": str(torch.cuda.get_device_properties(0).uuid) if gpu else "cpu"}
