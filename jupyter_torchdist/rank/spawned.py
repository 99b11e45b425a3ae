"""A rank in a fresh Python (``forking.spawn_rank``): read its arguments from stdin, then run it as a forked one.

Used where the parent cannot fork a rank that uses the GPU: a Spark Python worker that initialised CUDA for an
earlier task. The child arms the parent-death signal first and ends with ``os._exit``, as ``forking.fork_rank``'s do.
"""
from __future__ import annotations

import os
import pickle
import sys
import traceback
from typing import Any

from .forking import child_runs


def main() -> None:
    try:
        parent, args = pickle.load(sys.stdin.buffer)
    except BaseException:
        traceback.print_exc()
        os._exit(70)

    def body(args: tuple[Any, ...] = args) -> int:
        fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(fd, 0)  # the pipe is spent; the rank's stdin is nothing, as a Spark task's is
        os.close(fd)
        from .main import rank_main

        return rank_main(*args)

    child_runs(parent, body)


if __name__ == "__main__":
    main()
