"""The IPython magics: parse, compile, capture, launch, show. Only wiring; the steps live elsewhere."""
from __future__ import annotations

import os
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from .capture import CaptureError, pack
from .cell import CellSyntaxError, compile_cell
from .errors import DistributeError
from .launchers import get_launcher
from .options import OptionsError, RunOptions, options_help, parse_options
from .supervisor import RunResult, execute
from .views import make_view

__all__ = ["DistributeMagics", "load", "unload", "last_run"]

WARMUP_ENV = "JUPYTER_TORCHDIST_WARMUP"
_last: RunResult | None = None


class CaptureFailed(DistributeError):
    """The cell uses something that cannot travel to the ranks."""


def last_run() -> RunResult | None:
    """The last run's result in this kernel (state, every rank's logs), failed runs included."""
    return _last


def _script_payload(options: RunOptions) -> tuple[Any, str]:
    from .script import script_function

    return script_function(list(options.script)), f"script {' '.join(options.script)}"



def _cell_number(shell: Any) -> int:
    """The running cell's prompt number, as IPython names it in tracebacks ("Cell In[5]").

    IPython 9 counts up before running the cell, IPython 8 after; the displayhook holds the
    running cell's own ExecutionResult in both."""
    result = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    count = getattr(result, "execution_count", None)
    return count if isinstance(count, int) else shell.execution_count

@magics_class
class DistributeMagics(Magics):
    @line_cell_magic
    def distribute(self, line: str, cell: str | None = None) -> Any:
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
        if cell is not None:
            source = self.shell.transform_cell(cell)
            try:
                compiled = compile_cell(source, self.shell.user_ns, header=f"%%distribute {line}",
                                        filename=f"Cell In[{_cell_number(self.shell)}]")
            except CellSyntaxError as exc:
                self.shell.showsyntaxerror(filename=exc.filename)
                return None
            fn, filename, source = compiled.fn, compiled.filename, compiled.source
            title = f"%%distribute {line}".strip()
        else:
            fn, title = _script_payload(options)
            filename, source = "<script>", ""
        try:
            payload = pack(fn, max_bytes=int(options.max_payload_mb * (1 << 20)))
        except CaptureError as exc:
            raise CaptureFailed(str(exc)) from None
        return self._run(payload, options, filename, source, title)

    def _run(self, payload: bytes, options: RunOptions, filename: str, source: str, title: str) -> Any:
        global _last
        view = make_view(self.shell, options.quiet)
        try:
            result = execute(payload, options, get_launcher(options.local), view,
                             filename=filename, source=source, title=title)
        except DistributeError as exc:
            _last = getattr(exc, "result", None)
            raise
        _last = result
        if options.output:
            self.shell.user_ns[options.output] = result.value
        return result.value


DistributeMagics.distribute.__doc__ = (
    "Run a cell (%%distribute) or a torchrun-style script (%distribute ... script.py ARGS) as N "
    "distributed PyTorch ranks.\n\n" + options_help()
)


def load(ipython: Any) -> None:
    ipython.register_magics(DistributeMagics)
    if os.environ.get(WARMUP_ENV, "1") != "0":
        try:
            from .launchers.spark import warm_up_async

            warm_up_async()
        except ImportError:
            pass  # no pyspark: --local still works


def unload(ipython: Any) -> None:
    pass
