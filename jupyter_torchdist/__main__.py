"""``python -m jupyter_torchdist -n 2 [--local] [--gpu] train.py ARGS``: torchrun's job, our runtime. (Also the
``jupyter-torchdist`` command; ``jupyter-torchdist doctor [--gpu]`` checks the installation: ``kernel/doctor.py``;
``jupyter-torchdist runs [--json] [--all]`` lists the runs of your kernels and ``jupyter-torchdist stop RUN_ID`` stops
one: ``panel/cli.py``; ``jupyter-torchdist tracking [resend|drop]`` lists the tracking records not yet sent and sends
or drops them: ``tracking/cli.py``; ``jupyter-torchdist prepare`` builds the archive embedded Spark sessions start
from: ``launchers/session/class_archive.py``.)

The options are the magic's (one parser, one help text: ``options.py``). horovodrun's spelling of the
one-machine case, ``-np 4 [-H localhost:4] python train.py ARGS``, is translated into them first
(``from_horovodrun``); several hosts, or horovodrun's MPI and tuning flags, are usage errors. The same backends (an
embedded local Spark session by default, plain local processes with ``--local``), the text view,
and the root cause on stderr when a rank fails. Exit status: 0 success, 1 a rank failed, 2 bad
arguments or the run could not be placed, 124 ``--timeout`` passed, 130 interrupted (Ctrl-C).
"""
from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Sequence
from typing import TextIO

from .core.errors import DistributeError, LaunchError, OptionsError, RunInterrupted, RunTimeout
from .core.options import CLI_PROG, RunOptions, option_arity, options_help, parse_argv

__all__ = ["main", "from_horovodrun", "EXIT_FAILED", "EXIT_USAGE", "EXIT_TIMEOUT", "EXIT_INTERRUPTED"]

EXIT_FAILED, EXIT_USAGE, EXIT_TIMEOUT, EXIT_INTERRUPTED = 1, 2, 124, 130
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_CLUSTER = ("this command runs ranks on this machine only. To run on several hosts, use a Spark cluster: create a "
            "SparkSession on it and run %%distribute, jupyter_torchdist.horovod.spark.run or TorchDistributor there "
            "(docs/user-guide/clusters.md: \"On a real cluster\")")
_HOROVODRUN_ONLY: dict[str, tuple[str, ...]] = {
    f"it places ranks on other hosts or picks their network, and {_CLUSTER}": (
        "--hostfile", "-hostfile", "--host-discovery-script", "--slots-per-host",
        "--elastic-timeout", "--blacklist-cooldown-range", "-p", "--ssh-port", "-i",
        "--ssh-identity-file", "--network-interface", "--network-interfaces", "--tcp"),
    "MPI is not used: the ranks talk over torch.distributed (gloo; NCCL with --gpu). Drop it": (
        "--mpi", "--mpi-args", "--binding-args", "--jsrun", "--mpi-threads-disable"),
    "it tunes or logs Horovod's own runtime, which is not used here (torch.distributed does the communication; "
    "torch.profiler records it). Drop it": (
        "--fusion-threshold-mb", "--cycle-time-ms", "--cache-capacity", "--disable-cache", "--hierarchical-allreduce",
        "--hierarchical-allgather", "--autotune", "--autotune-log-file", "--timeline-filename",
        "--timeline-mark-cycles", "--no-stall-check", "--num-nccl-streams", "--thread-affinity",
        "--gloo-timeout-seconds", "--start-timeout", "--output-filename", "--log-level", "--config-file",
        "--prefix-output-with-timestamp", "-v", "--verbose", "-cb", "--check-build"),
}
_HOROVODRUN_VALUED = ("-np", "--num-proc", "-H", "--hosts", "--min-np", "--max-np", "--reset-limit")


def _horovodrun_refusal(flag: str) -> str | None:
    for reason, flags in _HOROVODRUN_ONLY.items():
        if flag in flags:
            return f"horovodrun's {flag} has no meaning here: {reason}."
    return None


def _is_python(token: str) -> bool:
    """The interpreter horovodrun is told to start (python, python3, python3.11, this interpreter's path)."""
    return bool(_PYTHON.match(os.path.basename(token))) or os.path.realpath(token) == os.path.realpath(sys.executable)


def _local_slots(spec: str) -> int | None:
    """``-H localhost:4``: the slots given (None without ``:N``); several hosts or another machine: a usage error."""
    hosts = [h for h in spec.split(",") if h]
    if len(hosts) != 1:
        raise OptionsError(f"-H {spec} names {len(hosts)} hosts, but {_CLUSTER}.")
    name, _, slots = hosts[0].rpartition(":") if hosts[0].count(":") == 1 else (hosts[0], "", "")
    local = {"localhost", "127.0.0.1", "::1", socket.gethostname(), socket.gethostname().split(".")[0]}
    if name not in local and name != socket.getfqdn():
        raise OptionsError(f"-H {spec}: {name} is not this machine, and {_CLUSTER}.")
    if slots and not slots.isdigit():
        raise OptionsError(f"-H {spec}: the slots after ':' must be a whole number (e.g. -H localhost:4)")
    return int(slots) if slots else None


def _with_hosts(out: list[str], np: str | None, spec: str) -> list[str]:
    """Check ``-H`` against ``-np``; without ``-np``, the host's slots are the number of ranks."""
    slots = _local_slots(spec)
    if np is None:
        return out + ["-n", str(slots)] if slots is not None else out
    if slots is not None and np.isdigit() and int(np) > slots:
        raise OptionsError(f"-np {np} needs {np} slots, but -H {spec} gives {slots}: raise the slots or lower -np.")
    return out


def from_horovodrun(argv: Sequence[str]) -> list[str]:
    """horovodrun's spelling into ours: ``-np 4 [-H localhost:4] [python] train.py ARGS`` -> ``-n 4 train.py ARGS``.

    Our own options pass through unchanged; ``--gloo`` is accepted (it is what runs); horovodrun's other flags
    and several or remote hosts raise ``OptionsError`` saying what to do instead.
    """
    out: list[str] = []
    np: str | None = None
    hosts: str | None = None
    bounds: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
        flag, eq, inline = argv[i].partition("=")
        ours = option_arity(flag, CLI_PROG)
        takes = ours if ours is not None else int(flag in _HOROVODRUN_VALUED)
        value = inline if eq else (argv[i + 1] if takes and i + 1 < len(argv) else None)
        start, i = i, i + 1 + (1 if takes and not eq else 0)
        if flag in ("-np", "--num-proc", "-n", "--nprocs"):
            if value is None:
                raise OptionsError(f"{flag} needs a number of ranks (e.g. {flag} 4)")
            np, out = value, out + ["-n", value]
        elif flag in ("-H", "--hosts"):
            hosts = value or ""
        elif flag == "--reset-limit":  # horovodrun's elastic restarts: ours restart every rank on the same N
            out += ["--max-restarts", value or ""]
        elif flag in ("--min-np", "--max-np"):
            bounds[flag] = value or ""
        elif ours is None and (refusal := _horovodrun_refusal(flag)):
            raise OptionsError(refusal)
        elif flag != "--gloo":
            out += argv[start:i]
    rest = list(argv[i:])
    if rest and _is_python(rest[0]):
        rest = rest[1:]
        if rest and rest[0].startswith("-"):
            raise OptionsError(f"{argv[i]} {rest[0]}: only a script runs here, not Python's own options or "
                               "modules: -np 2 python train.py ARGS")
    _check_bounds(np, bounds)
    return (_with_hosts(out, np, hosts) if hosts is not None else out) + rest


def _check_bounds(np: str | None, bounds: dict[str, str]) -> None:
    """horovodrun's ``--min-np``/``--max-np``: the run keeps ``-np`` ranks (a restart waits for as many slots), so
    they are only checked against it."""
    for flag, value in bounds.items():
        if not value.isdigit():
            raise OptionsError(f"{flag} needs a whole number of ranks (e.g. {flag} 2)")
    low, high = int(bounds.get("--min-np", "0")), bounds.get("--max-np")
    if np is not None and np.isdigit() and (int(np) < low or (high is not None and int(np) > int(high))):
        raise OptionsError(f"-np {np} is outside --min-np {bounds.get('--min-np', '-')} .. --max-np {high or '-'}: "
                           "the ranks here stay -np (a lost rank restarts all of them on as many slots)")


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
    """-h/--help among the options, before the script (after it, they are the script's); an option's value
    (``-n 2``, ``-np 2``) is not the script."""
    skip = 0
    for token in argv:
        if skip:
            skip -= 1
            continue
        if token in ("-h", "--help"):
            return True
        if not token.startswith("-"):
            return False
        if "=" not in token:
            skip = option_arity(token, CLI_PROG) or (1 if token in ("-np", "--num-proc", "-H", "--hosts") else 0)
    return False


def _run(options: RunOptions) -> None:
    from .kernel.runs.driver import Work, launch
    from .kernel.script_source import script_function
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
    if args[:1] in (["runs"], ["stop"]):   # the runs of your kernels: jupyter_torchdist/panel/cli.py
        from .panel.cli import main as runs

        return runs(args)
    if args[:1] == ["doctor"]:
        from .kernel.doctor import main as doctor

        return doctor(args[1:])
    if args[:1] == ["prepare"] and len(args) == 1:  # the JVM's class archive now: launchers/session/class_archive.py
        from .launchers.session.class_archive import prepare
        from .launchers.session.embedded import rehearse

        return prepare(rehearse)
    if args[:1] == ["tracking"]:   # records not yet sent, by destination: jupyter_torchdist/tracking/cli.py
        from .tracking.cli import main as tracking

        return tracking(args[1:])
    if _wants_help(args):
        print(options_help(CLI_PROG))
        return 0
    try:
        options = parse_argv(from_horovodrun(args), CLI_PROG)
        _run(options)
    except DistributeError as exc:
        _print_failure(exc, sys.stderr)
        return _exit_code(exc)
    except KeyboardInterrupt:  # before the ranks started (e.g. while Spark was starting)
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        from .tracking.shipper import send_before_exit

        send_before_exit()   # --track: the command ends once its run's record is sent (or kept for the next kernel)
        if "pyspark" in sys.modules:
            from .launchers.session.embedded import stop_embedded_session

            stop_embedded_session()
    return 0


if __name__ == "__main__":
    sys.exit(main())
