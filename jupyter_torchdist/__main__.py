"""``python -m jupyter_torchdist -n 2 [--local] [--gpu] train.py ARGS``: torchrun's job, our runtime.

The same backends as the magic (an embedded local Spark session by default, plain local
processes with ``--local``), the text view, and the root cause on stderr when a rank fails.
Exit status: 0 success, 1 a rank failed, 2 bad arguments or the run could not be placed,
124 ``--timeout`` passed, 130 interrupted (Ctrl-C).
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import Sequence, TextIO

from .errors import DistributeError, LaunchError, RunInterrupted, RunTimeout
from .options import OptionsError, RunOptions

__all__ = ["main", "build_parser", "EXIT_FAILED", "EXIT_USAGE", "EXIT_TIMEOUT", "EXIT_INTERRUPTED"]

EXIT_FAILED, EXIT_USAGE, EXIT_TIMEOUT, EXIT_INTERRUPTED = 1, 2, 124, 130
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m jupyter_torchdist",
        description="Run a torchrun-style training script as N distributed PyTorch ranks "
                    "(Spark barrier tasks on an embedded local session, or local processes with --local).")
    p.add_argument("-n", "--nprocs", dest="n", type=int, default=2, metavar="N", help="number of ranks (default 2)")
    p.add_argument("--local", action="store_true", help="no Spark: N processes on this machine")
    p.add_argument("--gpu", action="store_true", help="one GPU per rank, NCCL backend (default: CPU, gloo)")
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="stop every rank and fail after SECONDS")
    p.add_argument("--threads", dest="backend_threads", type=int, metavar="T",
                   help="torch CPU threads per rank (default: cores / ranks on the host)")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-rank output, only the outcome")
    p.add_argument("script", help="the training script (it reads RANK, WORLD_SIZE, LOCAL_RANK... as under torchrun)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    return p


def _print_failure(exc: DistributeError, out: TextIO) -> None:
    lines = exc._render_traceback_()
    text = "\n".join(lines)
    print(text if out.isatty() else _ANSI.sub("", text), file=out, flush=True)


def _exit_code(exc: DistributeError) -> int:
    if isinstance(exc, RunTimeout):
        return EXIT_TIMEOUT
    if isinstance(exc, RunInterrupted):
        return EXIT_INTERRUPTED
    return EXIT_USAGE if isinstance(exc, LaunchError) else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        options = RunOptions(n=ns.n, gpu=ns.gpu, timeout=ns.timeout, local=ns.local,
                             backend_threads=ns.backend_threads, quiet=ns.quiet, script=(ns.script, *ns.args))
    except OptionsError as exc:
        parser.error(str(exc))
    from .capture import pack
    from .launchers import get_launcher
    from .script import script_function
    from .supervisor import execute
    from .views import NullView
    from .views.text import TextView

    try:
        fn = script_function(options.script)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    payload = pack(fn, max_bytes=int(options.max_payload_mb * (1 << 20)))
    view = NullView() if options.quiet else TextView()
    try:
        execute(payload, options, get_launcher(options.local), view,
                title=f"{' '.join(options.script)} on {options.n} ranks")
    except DistributeError as exc:
        _print_failure(exc, sys.stderr)
        return _exit_code(exc)
    except KeyboardInterrupt:  # before the ranks started (e.g. while Spark was starting)
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if not options.local:
            from .launchers.spark import stop_embedded_session

            stop_embedded_session()
    return 0


if __name__ == "__main__":
    sys.exit(main())
