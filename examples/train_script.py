"""An ordinary torchrun training script: `torchrun --nproc_per_node 2 train_script.py --epochs 3`.

Nothing in it is specific to jupyter-torchdist: it reads RANK/WORLD_SIZE from the environment and
calls init_process_group itself. In a notebook, `%distribute -n 2 train_script.py --epochs 3` runs it
unchanged. The data is synthetic (a noisy linear target), made in code.
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

try:  # optional: progress bars in the notebook's live view; a no-op anywhere else
    from jupyter_torchdist import report
except ImportError:  # plain torchrun without the package
    def report(**_):
        pass


def make_data(n=2048, features=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    w = torch.linspace(-1.0, 1.0, features)
    y = x @ w + 0.1 * torch.randn(n, generator=g)
    return TensorDataset(x, y.unsqueeze(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)

    dataset = make_data()
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()

    total, step = args.epochs * len(loader), 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            report(step=step, total=total, loss=loss)
        summed = loss.detach().clone()
        dist.all_reduce(summed)
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs}: mean last-batch loss {summed.item() / world:.4f} "
                  f"(world {world}, local rank {os.environ.get('LOCAL_RANK')})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
