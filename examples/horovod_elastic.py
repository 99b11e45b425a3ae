"""A Horovod *elastic* training script (Horovod's own pattern: TorchState, ElasticSampler, hvd.elastic.run),
running on jupyter-torchdist by changing one import. A lost rank restarts every rank from the last commit.

    # import horovod.torch as hvd
    import jupyter_torchdist.horovod as hvd

    python -m jupyter_torchdist -np 2 --max-restarts 3 python horovod_elastic.py --epochs 2
    %distribute -n 2 --max-restarts 3 horovod_elastic.py --epochs 2                 (in a notebook)

On a cluster add ``--checkpoint-dir`` with a folder every executor can reach. Without ``--max-restarts`` it runs
as any script does (commits stay in memory). Rank 0 saves the final weights with ``--out PATH``.
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import jupyter_torchdist.horovod as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--batches-per-commit", type=int, default=2)
parser.add_argument("--samples", type=int, default=256)
parser.add_argument("--out", default=None)
args = parser.parse_args()

hvd.init()
torch.manual_seed(0)

g = torch.Generator().manual_seed(1)
features = torch.randn(args.samples, 16, generator=g)
labels = (features[:, :4].sum(1) > 0).long()
dataset = TensorDataset(features, labels)

model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

train_sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=7)
train_loader = DataLoader(dataset, batch_size=args.batch_size, sampler=train_sampler)


def train(state):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        state.batch = batch_idx
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
        state.train_sampler.record_batch(batch_idx, args.batch_size)
        if state.batch % args.batches_per_commit == 0:
            state.commit()


def end_epoch(state):
    state.epoch += 1
    state.batch = 0
    state.train_sampler.set_epoch(state.epoch)
    state.commit()


@hvd.elastic.run
def full_train(state):
    while state.epoch < args.epochs:
        train(state)
        end_epoch(state)


def on_state_reset():
    # Horovod rescales the learning rate to the new number of workers here; that number does not change.
    for group in optimizer.param_groups:
        group["lr"] = 0.05 * hvd.size()


state = hvd.elastic.TorchState(model, optimizer, train_sampler=train_sampler, epoch=0, batch=0)
state.register_reset_callbacks([on_state_reset])
full_train(state)

if args.out and hvd.rank() == 0:
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, args.out)
