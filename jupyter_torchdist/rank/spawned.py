"""A rank in a fresh Python (``forking.spawn_rank``): read its arguments from stdin, then run it as a forked one.

Used where the parent cannot fork a rank that uses the GPU: a Spark Python worker that initialised CUDA for an
earlier task. The child arms the parent-death signal first and ends with ``os._exit``, as ``forking.fork_rank``'s do.
"""
from __future__ import annotations

import os
import pickle
import sys
import traceback

from .forking import set_parent_death_signal


def main() -> None:
    code = 70
    try:
        parent, args = pickle.load(sys.stdin.buffer)
        set_parent_death_signal()
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(code)
        fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(fd, 0)  # the pipe is spent; the rank's stdin is nothing, as a Spark task's is
        os.close(fd)
        from .main import rank_main

        code = rank_main(*args)
    except BaseException:
        try:
            traceback.print_exc()
        except BaseException:
            pass
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    main()
