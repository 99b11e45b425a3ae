"""``python -m jupyter_torchdist -n 2 [--local] [--gpu] train.py ARGS``: torchrun's job, our runtime.

The options are the magic's (one parser, one help text: ``options.py``). The same backends (an
embedded local Spark session by default, plain local processes with ``--local``), the text view,
and the root cause on stderr when a rank fails. Exit status: 0 success, 1 a rank failed, 2 bad
arguments or the run could not be placed, 124 ``--timeout`` passed, 130 interrupted (Ctrl-C).
"""
from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import TextIO

from .errors import DistributeError, LaunchError, OptionsError, RunInterrupted, RunTimeout
from .options import CLI_PROG, RunOptions, options_help, parse_argv

__all__ = ["main", "EXIT_FAILED", "EXIT_USAGE", "EXIT_TIMEOUT", "EXIT_INTERRUPTED"]

EXIT_FAILED, EXIT_USAGE, EXIT_TIMEOUT, EXIT_INTERRUPTED = 1, 2, 124, 130
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _print_failure(exc: DistributeError, out: TextIO) -> None:
    text = "\n".join(exc._render_traceback_())
    print(text if out.isatty() else _ANSI.sub("", text), file=out, flush=True)


def _exit_code(exc: DistributeError) -> int:
    if isinstance(exc, RunTimeout):
        return EXIT_TIMEOUT
    if isinstance(exc, RunInterrupted):
        return EXIT_INTERRUPTED
    return EXIT_USAGE if isinstance(exc, (LaunchError, OptionsError)) else EXIT_FAILED


def _wants_help(argv: list[str]) -> bool:
    """-h/--help among the options, before the script (after it, they are the script's)."""
    for token in argv:
        if token in ("-h", "--help"):
            return True
        if not token.startswith("-"):
            return False
    return False


def _run(options: RunOptions) -> None:
    from .kernel.run import Work, launch
    from .kernel.script import script_function
    from .views import NullView
    from .views.text import TextView

    try:
        fn = script_function(options.script)
    except (OSError, ValueError) as exc:
        raise LaunchError(str(exc)) from None
    title = f"{' '.join(options.script)} on {options.n} ranks"
    launch(Work(fn, title=title, filename="<script>"), options, NullView() if options.quiet else TextView())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if _wants_help(args):
        print(options_help(CLI_PROG))
        return 0
    try:
        options = parse_argv(args, CLI_PROG)
        _run(options)
    except DistributeError as exc:
        _print_failure(exc, sys.stderr)
        return _exit_code(exc)
    except KeyboardInterrupt:  # before the ranks started (e.g. while Spark was starting)
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if "pyspark" in sys.modules:
            from .launchers.spark_session import stop_embedded_session

            stop_embedded_session()
    return 0


if __name__ == "__main__":
    sys.exit(main())
