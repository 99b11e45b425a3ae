"""The IPython magics: parse, compile, run, show. Only wiring; each step lives in its own module."""
from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from traitlets import Float, Int, Unicode, observe

from ...core.errors import OptionsError
from ...launchers import guard_interrupts, limits, may_use_spark, on_load, on_unload, warm_up_on
from ...core.options import RunOptions, options_help, parse_options
from ...core.track_options import TRACK_ENV, configure_default
from ...views import make_view
from . import background as background_magic, kept as kept_magic
from ..runs import view_requests as control
from ..cell import CellSyntaxError, compile_cell
from ..runs.idle import DEFAULT_IDLE_S, IDLE_ENV, IdleWatch, idle_seconds
from ..kept.ranks import notebook_ranks
from ..runs.driver import Work, launch
from ..runs.history import runs
from ...tracking import prefetch_defaults
from ...tracking.shipper import resume as resume_tracking

__all__ = ["DistributeMagics", "load", "unload"]



def _cell_number(shell: Any) -> int:
    """The running cell's prompt number, as IPython names it in tracebacks ("Cell In[5]").

    IPython 9 counts up before running the cell, IPython 8 after; the displayhook holds the
    running cell's own ExecutionResult in both."""
    result = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    count = getattr(result, "execution_count", None)
    return count if isinstance(count, int) else int(shell.execution_count)


def _parse(line: str, cell: str | None) -> RunOptions:
    try:
        options = parse_options(line)
    except OptionsError as exc:
        raise UsageError(str(exc)) from None
    if cell is None and not options.script:
        raise UsageError("%distribute needs a script (`%distribute -n 2 train.py --lr 0.1`); "
                         "for a cell, use %%distribute on the cell's first line.")
    if cell is not None and options.script:
        raise UsageError(f"unexpected arguments {' '.join(options.script)!r}: %%distribute takes options only; "
                         "see %%distribute?")
    if cell is None and options.keep:
        raise UsageError("--keep keeps a cell's namespace on the ranks: use it with %%distribute on a cell "
                         "(a script runs on fresh ranks each time)")
    return options


@magics_class
class DistributeMagics(Magics):
    shell: Any  # IPython's own annotation allows None; a registered magic always has its shell
    idle_seconds = Float(DEFAULT_IDLE_S, help="Seconds with no cell executed, no run and no kept ranks after which "
                         "the notebook gives back what only speeds up the next run (the local process server, idle "
                         f"Spark Python workers); 0: never. The environment's {IDLE_ENV} wins.").tag(config=True)
    max_local_ranks = Int(0, help="The largest -n of a run as local processes on this machine (--local); 0: no "
                          f"limit. For a server's administrator; {limits.ENV['local_ranks']} wins.").tag(config=True)
    max_embedded_ranks = Int(0, help="The largest -n on the embedded local Spark session; 0: no limit. "
                             f"{limits.ENV['embedded_ranks']} wins.").tag(config=True)
    max_background_runs = Int(0, help="How many background runs and sweeps one notebook may have going at once; 0: "
                              f"no limit. {limits.ENV['background_runs']} wins.").tag(config=True)

    track = Unicode("", help="What a run without --track records: mlflow, tensorboard, wandb, several with commas, or "
                    f"none (''/unset: ${TRACK_ENV}, else nothing). --track on a cell wins.").tag(config=True)

    @observe("track")
    def _track_changed(self, _: Any = None) -> None:
        configure_default(self.track)
        prefetch_defaults()   # every run records to it: its package imported before the first run asks

    @observe("max_local_ranks", "max_embedded_ranks", "max_background_runs")
    def _limits_changed(self, _: Any = None) -> None:
        limits.configure(local_ranks=self.max_local_ranks, embedded_ranks=self.max_embedded_ranks,
                         background_runs=self.max_background_runs)

    @line_cell_magic
    def distribute(self, line: str, cell: str | None = None) -> Any:
        options = _parse(line, cell)
        if options.keep and cell is not None:
            return kept_magic.run_kept(self.shell, line, cell, options, _cell_number(self.shell))
        work = self._cell_work(line, cell) if cell is not None else self._script_work(options)
        if work is None:
            return None  # a syntax error, already shown the way IPython shows one
        if options.detach:   # a run or a sweep, handed to a runner of its own
            return background_magic.run_detached(self.shell, work, options)
        if options.sweep:
            return background_magic.run_sweep(self.shell, work, options)
        if options.background:
            return background_magic.run_background(self.shell, work, options)
        result = launch(work, options, make_view(self.shell, options.quiet))
        if options.output:
            self.shell.user_ns[options.output] = result.value
        return result.value

    def _cell_work(self, line: str, cell: str) -> Work | None:
        shell = self.shell
        try:
            compiled = compile_cell(shell.transform_cell(cell), shell.user_ns, header=f"%%distribute {line}",
                                    filename=f"Cell In[{_cell_number(shell)}]")
        except CellSyntaxError as exc:
            shell.showsyntaxerror(filename=exc.filename)
            return None
        return Work(compiled.fn, title=f"%%distribute {line}".strip(), filename=compiled.filename,
                    source=compiled.source)

    @line_magic
    def distribute_doctor(self, line: str) -> None:
        """What this installation has and lacks, each finding with its fix (``%distribute_doctor --gpu`` when
        GPU runs are expected); the notebook's own SparkSession's executors too, when it has one."""
        from ...launchers.session.notebook import notebook_session
        from ..doctor import diagnose, report

        print(report(diagnose(gpu="--gpu" in line.split(), session=notebook_session())))

    @line_magic
    def distribute_debug(self, line: str) -> None:
        """Open the post-mortem (pdb, here in the notebook) of the kept rank whose cell failed last, if it is
        still up (%%distribute --keep). For one-shot cells, --pdb opens it as the run fails."""
        kept_magic.debug_kept(self.shell)

    @line_magic
    def distribute_wait(self, line: str) -> Any:
        """Wait for a background run (%distribute_wait 3; the last one by default, or its whole sweep) and give its
        value, or raise its error as the cell would have in the foreground. An interrupt stops the wait, not the
        run."""
        return background_magic.wait_for(line)

    @line_magic
    def distribute_attach(self, line: str) -> Any:
        """Show a detached run's live view here (%distribute_attach ID: its id, as run.id, runs(detached=True) or
        the runs panel give it); the handle is the cell's value."""
        return background_magic.attach_here(self.shell, line)

    @line_magic
    def distribute_stop(self, line: str) -> None:
        """Stop the notebook's kept ranks (%%distribute --keep): every process ends, their slots are free."""
        print(kept_magic.stop_kept())

    @staticmethod
    def _script_work(options: RunOptions) -> Work:
        from ..script_source import script_function

        return Work(script_function(list(options.script)), title=f"script {' '.join(options.script)}",
                    filename="<script>")


DistributeMagics.distribute.__doc__ = (
    "Run a cell (%%distribute) or a torchrun-style script (%distribute ... script.py ARGS) as N "
    "distributed PyTorch ranks.\n\n" + options_help()
)


def _activate_embedded_session(*_: Any) -> None:
    """Before each cell: once our embedded session is up, it is the notebook's active session too
    (the JVM keeps the active session per thread, and it was made on a background thread); and the kernel's
    interrupt stops that cell, never our runs going on beside it (``launchers.interrupts``)."""
    from ...launchers.session.embedded import activate_embedded

    activate_embedded()
    guard_interrupts()


def _background_runs() -> list[str]:
    """The background runs and sweeps that have not ended and may run on Spark, in words (a session change waits)."""
    return [f"run {r.number}" for r in runs() if r.background and not r.done() and may_use_spark(r.options)]


class _Loaded:
    watch: IdleWatch | None = None   # the idle release (kernel/runs/idle.py), while the extension is loaded


def _touch(*_: Any) -> None:
    if _Loaded.watch is not None:
        _Loaded.watch.touch()


def _idle_watch(ipython: Any) -> IdleWatch:
    from ...launchers.session import idle_release

    magics = ipython.magics_manager.registry.get("DistributeMagics")

    def seconds() -> float:
        return idle_seconds(float(getattr(magics, "idle_seconds", DEFAULT_IDLE_S)))

    def busy() -> bool:
        return any(not r.done() for r in runs()) or notebook_ranks() is not None

    return IdleWatch(seconds, busy, idle_release.release, idle_release.rewarm)


def load(ipython: Any) -> None:
    ipython.register_magics(DistributeMagics)
    magics = ipython.magics_manager.registry.get("DistributeMagics")
    if magics is not None:
        magics._limits_changed()  # the configuration a profile set when the magics were made
        magics._track_changed()
    control.register(ipython)  # the live view's Stacks control reaches the kernel while a cell runs
    ipython.events.register("pre_run_cell", _activate_embedded_session)
    on_load(warm=warm_up_on(), busy_runs=_background_runs)
    resume_tracking()  # records an earlier kernel could not send (its tracking server was down)
    if _Loaded.watch is None:
        _Loaded.watch = _idle_watch(ipython)
        for event in ("pre_run_cell", "post_run_cell"):
            ipython.events.register(event, _touch)


def unload(ipython: Any) -> None:
    on_unload()
    control.unregister(ipython)
    for event, hook in (("pre_run_cell", _activate_embedded_session), ("pre_run_cell", _touch),
                        ("post_run_cell", _touch)):
        try:
            ipython.events.unregister(event, hook)
        except ValueError:
            pass
    if _Loaded.watch is not None:
        _Loaded.watch.stop()
        _Loaded.watch = None
