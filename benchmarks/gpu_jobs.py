"""What benchmarks/gpu_check.py runs on the GPU: each function runs on a rank (shipped by value) or in a plain
process, on ``device`` (the GPU, or the CPU for ``gpu_check.py --dry-run``)."""
from __future__ import annotations

import os
import time
from typing import Any


def _device() -> Any:
    import jupyter_torchdist as jt

    return jt.device()


def nccl_allreduce() -> dict[str, Any]:
    """One all_reduce on this rank's device: the sum, the backend and the device, back to the notebook."""
    import torch
    import torch.distributed as dist

    dev = _device()
    t = torch.full((4,), float(dist.get_rank() + 1), device=dev)
    dist.all_reduce(t)
    return {"sum": t[0].item(), "backend": dist.get_backend(), "device": str(dev),
            "name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}


def _block(cin: int, cout: int, stride: int) -> Any:
    from torch import nn

    class Block(nn.Module):  # ResNet's basic block
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                                      nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
            self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x: Any) -> Any:
            return (self.body(x) + self.skip(x)).relu()

    return Block()


def small_resnet() -> Any:
    """A ResNet-18-shaped network for 32x32 images, narrower (no torchvision needed)."""
    from torch import nn

    return nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                         _block(64, 64, 1), _block(64, 64, 1), _block(64, 128, 2), _block(128, 128, 1),
                         _block(128, 256, 2), _block(256, 256, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(256, 10))


def resnet_steps(steps: int = 60, warmup: int = 15, batch: int = 128) -> dict[str, Any]:
    """The DDP tutorial's loop (DDP over the rank's device, SGD, cross-entropy) on a small ResNet with synthetic
    images: steps/s over ``steps`` timed steps after ``warmup``. Needs a process group (ours, or the plain
    process's own)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = _device()
    torch.manual_seed(0)
    model = small_resnet().to(dev)
    ddp = DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(batch, 3, 32, 32, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)

    def step() -> Any:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(warmup):
        step()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    sync()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    sync()
    seconds = time.perf_counter() - t0
    return {"steps_per_s": steps / seconds, "loss": float(loss.item()), "device": str(dev)}


def plain_resnet(steps: int, warmup: int, batch: int, gpu: bool) -> dict[str, Any]:
    """The same loop in a plain process: its own one-rank group, as torchrun's single process would have."""
    import socket

    import torch
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if gpu:
        os.environ["LOCAL_RANK"] = "0"
        torch.cuda.set_device(0)
    dist.init_process_group("nccl" if gpu else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        return resnet_steps(steps, warmup, batch)
    finally:
        dist.destroy_process_group()


def lightning_fit(steps: int = 30) -> dict[str, Any]:
    """Lightning's Trainer(accelerator="gpu", strategy="ddp") fits a small model inside the rank."""
    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    class Regression(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
            self.losses: list[float] = []

        def training_step(self, batch: Any, _: int) -> Any:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.losses.append(float(loss.detach()))
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters(), lr=1e-2)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(1024, 32, generator=g)
    y = x[:, :4].sum(1, keepdim=True)
    model = Regression()
    gpu = _device().type == "cuda"
    trainer = L.Trainer(accelerator="gpu" if gpu else "cpu", devices="auto", strategy="ddp", max_steps=steps,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=32))
    return {"device": str(trainer.strategy.root_device), "first_loss": model.losses[0], "last_loss": model.losses[-1]}


def transformers_fit(steps: int = 20) -> dict[str, Any]:
    """Hugging Face's Trainer trains a tiny BERT made from a config (nothing downloaded) inside the rank."""
    import tempfile

    import torch
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    config = BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=64, num_labels=2)
    torch.manual_seed(0)
    model = BertForSequenceClassification(config)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 512, (256, 16), generator=g)
    rows = [{"input_ids": ids[i], "attention_mask": torch.ones(16, dtype=torch.long),
             "labels": int(ids[i, 0] % 2)} for i in range(256)]
    args = TrainingArguments(output_dir=tempfile.mkdtemp(), max_steps=steps, per_device_train_batch_size=16,
                             learning_rate=1e-3, report_to=[], save_strategy="no", logging_steps=5,
                             use_cpu=_device().type != "cuda")
    trainer = Trainer(model=model, args=args, train_dataset=rows)
    out = trainer.train()
    return {"device": str(args.device), "model_device": str(next(model.parameters()).device),
            "train_loss": float(out.training_loss), "steps": int(out.global_step)}


def local_rank_tutorial() -> dict[str, Any]:
    """The tutorial's lines as written: the device from LOCAL_RANK, the model there, an all_reduce."""
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ["LOCAL_RANK"])
    gpu = torch.cuda.is_available() and os.environ.get("JUPYTER_TORCHDIST_DEVICE", "").startswith("cuda")
    if gpu:
        torch.cuda.set_device(local_rank)
    model = torch.nn.Linear(8, 8).to(local_rank if gpu else "cpu")
    t = torch.ones(1, device=next(model.parameters()).device)
    dist.all_reduce(t)
    return {"rank": dist.get_rank(), "local_rank": local_rank, "sum": t.item(),
            "device": str(next(model.parameters()).device),
            "uuid": str(torch.cuda.get_device_properties(local_rank).uuid) if gpu else "cpu"}
