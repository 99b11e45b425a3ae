"""A training script written for Horovod, running on jupyter-torchdist by changing one import.

    # import horovod.torch as hvd
    import jupyter_torchdist.horovod as hvd

Launch it as you would with horovodrun, or as a torchrun script:

    python -m jupyter_torchdist -np 2 python horovod_train.py --epochs 2      (horovodrun -np 2 python ...)
    %distribute -n 2 horovod_train.py --epochs 2                              (in a notebook)
    torchrun --nproc-per-node 2 horovod_train.py --epochs 2

A small CNN classifies synthetic 28x28 "digits" (noisy copies of 10 fixed random patterns, made with torch:
nothing to download). Rank 0 saves a checkpoint with the model, the optimizer and its per-step losses.
"""
import argparse
import os

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import jupyter_torchdist.horovod as hvd

try:  # optional: progress in the notebook's live view; a no-op anywhere else
    from jupyter_torchdist import report
except ImportError:
    def report(**_):
        pass


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=5)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=5)
        self.fc1 = nn.Linear(16 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), dim=1)


def make_data(n, seed):
    """``n`` noisy 1x28x28 images of 10 fixed random patterns, labelled by their pattern."""
    g = torch.Generator().manual_seed(seed)
    patterns = torch.randn(10, 1, 28, 28, generator=torch.Generator().manual_seed(1234))
    labels = torch.randint(0, 10, (n,), generator=g)
    return TensorDataset(patterns[labels] + 1.5 * torch.randn(n, 1, 28, 28, generator=g), labels)


def parse_args():
    parser = argparse.ArgumentParser(description="Horovod-style training on synthetic digits")
    parser.add_argument("--batch-size", type=int, default=64, help="batch size per rank")
    parser.add_argument("--test-batch-size", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate for one rank (scaled by size)")
    parser.add_argument("--momentum", type=float, default=0.5)
    parser.add_argument("--train-size", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--no-cuda", action="store_true", help="train on the CPU even when CUDA is available")
    parser.add_argument("--fp16-allreduce", action="store_true", help="compress gradients to float16 on the wire")
    parser.add_argument("--log-interval", type=int, default=8, help="steps between loss lines (rank 0)")
    parser.add_argument("--checkpoint", default="horovod_checkpoint.pt", help="where rank 0 saves the model")
    return parser.parse_args()


def metric_average(value, name):
    """The mean of a number over every rank."""
    return hvd.allreduce(torch.tensor(float(value)), name=name).item()


def train_epoch(epoch, model, optimizer, loader, sampler, device, args, losses):
    model.train()
    sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
    for batch, (images, labels) in enumerate(loader):
        images, labels = images.to(device), labels.to(device)
        optimizer.zero_grad()
        loss = F.nll_loss(model(images), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        report(step=len(losses), total=args.epochs * len(loader), loss=loss)
        if hvd.rank() == 0 and batch % args.log_interval == 0:
            print(f"epoch {epoch} [{batch * len(images)}/{len(sampler)}] loss {loss.item():.4f}", flush=True)


def evaluate(model, loader, sampler, device):
    """Mean loss and accuracy over the whole test set (each rank scores its shard, then allreduce)."""
    model.eval()
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            out = model(images)
            loss_sum += F.nll_loss(out, labels, reduction="sum").item()
            correct += (out.argmax(dim=1) == labels).sum().item()
    return metric_average(loss_sum / len(sampler), "avg_loss"), metric_average(correct / len(sampler), "avg_acc")


def main():
    args = parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    cuda = torch.cuda.is_available() and not args.no_cuda
    if cuda:
        torch.cuda.set_device(hvd.local_rank())  # one GPU per rank on each host
        torch.cuda.manual_seed(args.seed)
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))  # one share of the cores each
    device = torch.device("cuda") if cuda else torch.device("cpu")

    train_set, test_set = make_data(args.train_size, args.seed), make_data(512, args.seed + 1)
    train_sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank(), seed=args.seed)
    test_sampler = DistributedSampler(test_set, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
    test_loader = DataLoader(test_set, batch_size=args.test_batch_size, sampler=test_sampler)

    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)  # every rank starts from rank 0's weights
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression, op=hvd.Average)

    losses = []
    for epoch in range(1, args.epochs + 1):
        train_epoch(epoch, model, optimizer, train_loader, train_sampler, device, args, losses)
        test_loss, test_acc = evaluate(model, test_loader, test_sampler, device)
        if hvd.rank() == 0:
            print(f"epoch {epoch}: test loss {test_loss:.4f}, accuracy {100 * test_acc:.1f}% "
                  f"(size {hvd.size()}, local size {hvd.local_size()})", flush=True)
            torch.save({"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "losses": losses, "test_loss": test_loss, "test_accuracy": test_acc}, args.checkpoint)


if __name__ == "__main__":
    main()
