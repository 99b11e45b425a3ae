"""``%%distribute --keep`` and ``%distribute_stop``: the notebook's one set of kept ranks."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...core.errors import LaunchError, RunInterrupted
from ...launchers import backend_for, stand_in
from ...launchers.limits import check_background
from ...core.options import RunOptions
from ...rank.kept_payload import KeptPostMortem
from ...views import make_view
from ..cell import CellSyntaxError
from ..kept.ranks import KeptCell, KeptInfo, Ranks, notebook_ranks, set_notebook_ranks
from ..cell import kept_cell
from ..pickling import Packed, pack
from ..runs.driver import Pool, RunDriver, Work, start_on_thread
from ..runs.rankset import RankSet
from ..runs.restarts import Attempt
from ..runs.run import RunResult
from ..runs.history import background_going, new_run

__all__ = ["run_kept", "stop_kept", "kept", "debug_kept"]


def kept() -> KeptInfo | None:
    """The notebook's kept ranks (``%%distribute --keep``): ranks, backend, hosts and pids, since, cells; or None."""
    ranks = notebook_ranks()
    return ranks.describe() if ranks is not None else None


def _describe(info: KeptInfo) -> str:
    return f"{info.n} kept rank{'s' if info.n != 1 else ''} on {info.backend}, {info.cells} cells run"


def stop_kept() -> str:
    ranks = notebook_ranks()
    if ranks is None:
        return "no kept ranks are up (a %%distribute --keep cell starts them)"
    info = ranks.describe()
    cells = ranks.retire()
    set_notebook_ranks(None)
    if info is None:  # still starting, for a background cell: it and the cells after it are stopped, nothing starts
        return (f"stopped the kept ranks before they were up, and {_cells(cells)} in line for them: "
                "no rank process is left")
    slots = f"; their {info.n} {info.holds} are free" if info.holds else ""
    also = f" ({_cells(cells)} stopped with them)" if cells else ""
    return f"stopped the {_describe(info)}{also}: every rank process has ended{slots}"


def _cells(numbers: list[int]) -> str:
    return ", ".join(f"run {n}" for n in numbers) if numbers else "no cell"


def _differs(ranks: Ranks, options: RunOptions) -> str | None:
    """Why this cell cannot run on the notebook's kept ranks: they are up, or not up yet with cells in line for them
    (a background cell starting them on its thread), and this cell asks for other ones."""
    info = ranks.describe()
    n, gpu = (info.n, info.gpu) if info is not None else (ranks.options.n, ranks.options.gpu)
    if options.n_explicit and options.n != n:
        return f"this cell asks for -n {options.n}, the kept ranks are -n {n}"
    if options.gpu != gpu:
        return "this cell " + ("asks for --gpu" if options.gpu else "runs without --gpu")
    backend = backend_for(options).name
    theirs, stood_in = ((info.backend_name, info.stand_in) if info is not None
                        else (backend_for(ranks.options).name, stand_in(ranks.options) is not None))
    if backend != theirs and not (stood_in or stand_in(options)):  # started on this machine while the embedded
        # session started (or with no Java): they stay where they are, as kept ranks on it do
        return f"this cell runs on the {backend} backend, the kept ranks on the {theirs} backend"
    return None


def _ranks_for(options: RunOptions) -> Ranks:
    """The kept ranks this cell runs on: the notebook's, unless the cell asks for different ones."""
    ranks = notebook_ranks()
    why = _differs(ranks, options) if ranks is not None else None
    if ranks is not None and why is not None and ranks.busy():
        busy = ranks.busy()[0]
        raise LaunchError(f"the kept ranks are busy with run {busy} and {why}: wait for it (%distribute_wait {busy}) "
                          "or stop it (jupyter_torchdist.runs()[...].stop()) before starting different kept ranks")
    info = ranks.describe() if ranks is not None else None
    if ranks is not None and why is not None:
        ranks.stop()
        print(f"jupyter-torchdist: stopped the {_describe(info) if info else 'kept ranks'} ({why}); their state is "
              "gone. Starting new ones.")
        ranks = None
    if ranks is None:
        n = options.n if options.n_explicit or info is None else info.n
        ranks = Ranks.for_options(replace(options, n=n, timeout=None, all_ranks=False, data_workers=None))
        set_notebook_ranks(ranks)
    return ranks


def run_kept(shell: Any, line: str, cell: str, options: RunOptions, number: int) -> Any:
    """Run the cell on the notebook's kept ranks (starting them if none are up), after the cells already running
    or waiting there; its value, or (``--background``) its handle at once."""
    ranks = _ranks_for(options)
    filename = f"Cell In[{number}]"
    try:
        job = kept_cell(shell.transform_cell(cell), filename, shell.user_ns, ranks.rank_names,
                        set(getattr(shell, "user_ns_hidden", {})))
    except CellSyntaxError as exc:
        shell.showsyntaxerror(filename=exc.filename)
        return None
    payload = pack(job, max_bytes=options.max_payload_bytes, named=job.shipped)
    header = f"%%distribute {line}".strip()
    n = ranks.options.n
    run_options = options if options.n == n else replace(options, n=n)
    work = Work(job, title=f"{header} (a cell on kept ranks)", filename=filename, source=header + "\n" + job.source)
    view = make_view(shell, options.quiet, background=options.background)
    if options.background:
        check_background(background_going())
        run_options = replace(run_options, background=True)
    d = KeptCellDriver(new_run(work.title, run_options), payload, run_options, work, view, kept=ranks, header=header)
    if options.background:
        from .background import stores_output  # here: importing jupyter_torchdist must not import IPython

        d.show_waiting(None)
        d.run.on_outcome.append(stores_output(shell, options.output))
        d.arrive()  # in line now: the next cell on these ranks runs after this one, whenever its thread starts
        start_on_thread(d)
        return d.run
    result = d.life(deadline=None)
    if options.output:
        shell.user_ns[options.output] = result.value
    return result.value


class KeptCellDriver(RunDriver):
    """A cell on the notebook's kept ranks: its turn is theirs (one cell at a time, in the order they came), its
    ranks are the kept ones (started by the first cell; lost ones restart at the next cell with --max-restarts), and
    it has one attempt."""

    def __init__(self, run: Any, payload: Packed, options: RunOptions, work: Work, view: Any, *, kept: Ranks,
                 header: str) -> None:
        super().__init__(run, payload, options, work, view)
        self.kept, self.header = kept, header

    def _slots(self) -> list[Pool]:
        return [self.kept.turn(self.run)]

    def start_ranks(self, failed: list[Attempt]) -> RankSet:
        if self.run.stop_asked is not None:  # stopped on its way here (%distribute_stop, run.stop())
            raise RunInterrupted(f"stopped by {self.run.stop_asked} before it started on the kept ranks")
        title = f"{self.header} (cell {ranks_cells(self.kept) + 1} on kept ranks)"
        return self.kept.ready(KeptCell(self.payload, self.options, title, self.work.filename, self.work.source),
                               self.run)

    def supervise(self, ranks: RankSet, failed: list[Attempt]) -> RunResult:
        return self.kept.cell(ranks, self.payload, self.options, title=f"{self.header} (cell {ranks.cells + 1} on "
                              "kept ranks)", view=self.shown, filename=self.work.filename, source=self.work.source)

    def restart(self, exc: Any, ranks: RankSet, failed: list[Attempt], started: float) -> bool:
        return False


def ranks_cells(ranks: Ranks) -> int:
    info = ranks.describe()
    return info.cells if info is not None else 0


def debug_kept(shell: Any) -> None:
    """``%distribute_debug``: the post-mortem of the kept rank whose cell raised last, in the notebook."""
    ranks = notebook_ranks()
    info = ranks.describe() if ranks is not None else None
    if ranks is None or info is None:
        print("no kept ranks are up (none were started, or a failure stopped them): %distribute_debug opens the "
              "post-mortem of a failed %%distribute --keep cell while its ranks are up. For other cells, run "
              "them with --pdb.")
        return
    if info.failed_rank is None:
        print("the last kept cell did not raise on any rank: there is no failure to debug.")
        return
    options = replace(ranks.options, timeout=None, all_ranks=False, pdb=False, output=None)
    payload = pack(KeptPostMortem(info.failed_rank), max_bytes=options.max_payload_bytes)
    ranks.execute(payload, options, title=f"%distribute_debug: the post-mortem of rank {info.failed_rank}",
                  view=make_view(shell, options.quiet))
