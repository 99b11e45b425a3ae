"""Requests from the live view that reach a busy kernel: a handler on the kernel's control channel.

While a ``%%distribute`` cell runs, the kernel's main thread is in the run and its shell channel (widget
messages included) waits for the cell. ipykernel reads the control channel on a thread of its own, so the
JupyterLab plugin sends the Stacks control's request there (``labextension/src/control.ts``) as a message of
type ``REQUEST_TYPE``; the handler, registered by ``%load_ext``, hands it to the run going on (a message in its
inbox) and replies at once. A background run's view names its run (its Stacks and its Stop reach that run only:
the kernel's interrupt would stop whatever cell runs now, not it). Kernels without a control thread or a handler
table (other kernels, old ipykernels) are left alone: the view then shows the hint, and an interrupt still shows
where each rank was.
"""
from __future__ import annotations

import functools
from typing import Any, Final

from ...core import contract as C
from .debugging import tell_foreground
from .history import find
from .supervisor import FOCUS_MAX

__all__ = ["register", "unregister", "REQUEST_TYPE", "REPLY_TYPE"]

REQUEST_TYPE: Final = "jupyter_torchdist_request"
REPLY_TYPE: Final = "jupyter_torchdist_reply"


def _handlers(shell: Any) -> dict[str, Any] | None:
    handlers = getattr(getattr(shell, "kernel", None), "control_handlers", None)
    return handlers if isinstance(handlers, dict) else None


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _accept(content: Any) -> bool:
    """Hand the request to its run (the run numbered ``run``, else the run going on in the foreground): ``stacks``,
    ``focus`` (the ranks a many-rank run's view opened: ``ranks``) or ``stop`` (a background run's Stop)."""
    want = content.get("want") if isinstance(content, dict) else None
    number = content.get("run") if isinstance(content, dict) else None
    run = find(number) if isinstance(number, int) and not isinstance(number, bool) else None
    ask: C.WhereWantedMsg | C.FocusWantedMsg
    if want == "stacks":
        ask = {"t": C.WHERE_WANTED}
    elif want == "focus" and isinstance(ranks := content.get("ranks"), list) and all(_int(r) for r in ranks):
        ask = {"t": C.FOCUS_WANTED, "ranks": ranks[:FOCUS_MAX]}
    elif want == "stop" and run is not None:
        return run.stop("the view's Stop")
    else:
        return False
    return run.ask(ask) if run is not None else tell_foreground(ask)


def _on_request(kernel: Any, stream: Any, ident: Any, parent: dict[str, Any]) -> None:
    """Runs on the kernel's control thread: pass the request on, never block, never raise."""
    content = parent.get("content") if isinstance(parent, dict) else None
    try:
        accepted = _accept(content)
    except Exception:
        accepted = False
    try:
        kernel.session.send(stream, REPLY_TYPE, {"status": "ok", "accepted": accepted}, parent, ident)
    except Exception:
        pass  # the request was handed on all the same; a front end that went away needs no reply


def register(shell: Any) -> bool:
    """Take the live view's requests in this shell's kernel; False where the kernel has no control handlers."""
    handlers = _handlers(shell)
    if handlers is None:
        return False
    handlers[REQUEST_TYPE] = functools.partial(_on_request, shell.kernel)
    return True


def unregister(shell: Any) -> None:
    handlers = _handlers(shell)
    if handlers is not None:
        handlers.pop(REQUEST_TYPE, None)
