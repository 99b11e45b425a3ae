"""A torchrun-style project for the script tests: train.py (argparse, its own process group, sibling imports,
exits and raises on request), a sibling module and a package."""
from __future__ import annotations

from pathlib import Path

__all__ = ["TRAIN", "make_project"]


TRAIN = '''\
import argparse, os, pickle, sys
import torch
import torch.distributed as dist
from helpers_mod import SCALE
from pkg.sub import twice


class Point:  # defined in the script: pickled by reference to the script's __main__
    def __init__(self, x):
        self.x = x


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--exit-on", type=int, default=-1)
    p.add_argument("--code", default="3")
    p.add_argument("--raise-on", type=int, default=-1)
    a = p.parse_args()
    dist.init_process_group("gloo", init_method="env://")  # torchrun scripts do this; the group is up
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    assert dist.get_rank() == rank and dist.get_world_size() == world
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    same = pickle.loads(pickle.dumps(Point(rank))).x == rank
    print(f"rank={rank} local={os.environ['LOCAL_RANK']} sum={t.item()} scale={SCALE} twice={twice(3)} "
          f"argv={sys.argv[1:]} file={os.path.basename(__file__)} pickled={same}")
    if a.exit_on in (rank, -2):  # -2: every rank
        sys.exit(int(a.code) if a.code.isdigit() else a.code)
    if rank == a.raise_on:
        raise RuntimeError("broken on purpose")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


def make_project(folder: Path) -> Path:
    """TRAIN as ``folder/train.py``, with ``helpers_mod.py`` and ``pkg/sub.py`` beside it; returns ``folder``."""
    (folder / "train.py").write_text(TRAIN)
    (folder / "helpers_mod.py").write_text("SCALE = 7\n")
    (folder / "pkg").mkdir()
    (folder / "pkg" / "__init__.py").write_text("")
    (folder / "pkg" / "sub.py").write_text("def twice(x):\n    return 2 * x\n")
    return folder
