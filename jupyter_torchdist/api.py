"""The plain Python API under the magic, for code outside notebooks."""
from __future__ import annotations

from typing import Any, Callable

from .capture import pack
from .launchers import get_launcher
from .options import RunOptions
from .supervisor import RunResult, execute
from .views import NullView

__all__ = ["run", "run_detailed"]


def run_detailed(fn: Callable[..., Any], *args: Any, n: int = 2, gpu: bool = False, local: bool = False,
                 timeout: float | None = None, all_ranks: bool = False, view: Any = None,
                 **kwargs: Any) -> RunResult:
    """Like ``run`` but returns the whole RunResult (every rank's value, state, logs)."""
    options = RunOptions(n=n, gpu=gpu, local=local, timeout=timeout, all_ranks=all_ranks)
    payload = pack(fn, args, kwargs, max_bytes=int(options.max_payload_mb * (1 << 20)))
    return execute(payload, options, get_launcher(local), view or NullView(),
                   title=f"run({getattr(fn, '__name__', 'fn')}) -n {n}")


def run(fn: Callable[..., Any], *args: Any, n: int = 2, gpu: bool = False, local: bool = False,
        timeout: float | None = None, all_ranks: bool = False, **kwargs: Any) -> Any:
    """Call ``fn(*args, **kwargs)`` on ``n`` ranks (process group ready) and return rank 0's value.

    With ``all_ranks=True`` the list of every rank's value comes back instead.
    """
    return run_detailed(fn, *args, n=n, gpu=gpu, local=local, timeout=timeout, all_ranks=all_ranks,
                        **kwargs).value
