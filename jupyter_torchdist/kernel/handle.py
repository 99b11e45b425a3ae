"""The one handle type the notebook holds: a run (``Run``) and a sweep of runs (``Sweep``) are both a ``Handle``.

A handle is a promise of an outcome, as ipyparallel's ``AsyncResult`` is (with ``AsyncMapResult`` beside it): the
same verbs mean the same thing and answer in the same types whatever it stands for. ``done()`` and ``wait(timeout)``
say whether it has ended; ``state`` says how it stands in words; ``result(timeout)`` gives its value or raises its
error; ``error`` is that error once it has ended without success; ``stop()`` stops whatever of it still goes and says
whether there was anything to stop. Whoever drives it calls ``_end()`` once, when its outcome is set.
"""
from __future__ import annotations

import secrets
import threading
from typing import Any, Final

__all__ = ["Handle", "new_id"]

SHOWN_MAX: Final = 8   # the displays of a handle kept up to date (a cell's value, and a few looks at it later)


def new_id() -> str:
    """A handle's durable id: 12 random hex digits (48 bits), so no two runs of any kernel, kernel restart or user ever
    share one in practice. The kernel's own number for a run (``run.number``) starts again at 1 with each kernel
    process; this never does, so a stop or an attach that names it reaches that run or none."""
    return secrets.token_hex(6)


class Handle:
    """What every handle does: wait for its end, say its state, give its outcome, stop."""

    def __init__(self) -> None:
        self.id: str = new_id()   # durable: the runs panel, ``jupyter-torchdist runs``/``stop`` and the report name it
        self._ended = threading.Event()
        self._error: BaseException | None = None
        self._shown: list[Any] = []   # the notebook's displays of it (IPython's DisplayHandle), kept up to date

    # -- the verbs every handle shares -------------------------------------------------------------------
    @property
    def state(self) -> str:
        """How it stands, in a word (queued, running, done, failed, stopped, ...)."""
        raise NotImplementedError

    @property
    def error(self) -> BaseException | None:
        """The error ``result()`` raises, once it has ended without success; None before, and after a success."""
        return self._error

    def done(self) -> bool:
        """Whether it has ended (whatever the outcome)."""
        return self._ended.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until it ends (at most ``timeout`` seconds); True when it has ended."""
        return self._ended.wait(timeout)

    def result(self, timeout: float | None = None) -> Any:
        """Its value once it has ended; raises its error if it ended without success, and ``TimeoutError`` when it
        has not ended within ``timeout`` seconds (it goes on)."""
        if not self._ended.wait(timeout):
            raise TimeoutError(f"{self._name()} has not ended after {timeout:g} s (it is {self.state}; it goes on)")
        if self._error is not None:
            raise self._error.with_traceback(None)
        return self._value()

    def stop(self, by: str = "stop()") -> bool:
        """Stop whatever of it still goes (queued parts never start). Returns at once, True when something was still
        going; ``wait()`` for the end."""
        raise NotImplementedError

    # -- what each kind fills in ---------------------------------------------------------------------------
    def _value(self) -> Any:
        """The value ``result()`` gives after a success."""
        raise NotImplementedError

    def _name(self) -> str:
        """How messages name it ("run 3", "the sweep over lr")."""
        raise NotImplementedError

    def _end(self) -> None:
        """Its outcome is set: everybody waiting wakes, and its displays say how it ended."""
        self._ended.set()
        self._redisplay()

    # -- how it shows in a notebook ----------------------------------------------------------------------------
    def _ipython_display_(self) -> None:
        """A cell whose value is a handle (a ``--background`` or ``--sweep`` cell's) shows its line as a display the
        handle updates when its state changes, so a saved notebook reads how the run ended, not "queued". ``_`` is
        the handle all the same (IPython sets it whatever displays the value)."""
        from IPython import get_ipython
        from IPython.display import display

        bundle = {"text/plain": repr(self)}
        if getattr(get_ipython(), "kernel", None) is None:  # a terminal: printed once (an update would print again)
            display(bundle, raw=True)  # type: ignore[no-untyped-call]
            return
        handle = display(bundle, raw=True, display_id=True)  # type: ignore[no-untyped-call]
        self._shown = [*self._shown, handle][-SHOWN_MAX:]

    def _redisplay(self) -> None:
        """Its displays say its state now (from whichever thread changed it: front ends find a display by its id)."""
        for handle in self._shown:
            try:
                handle.update({"text/plain": repr(self)}, raw=True)
            except Exception:
                pass  # the kernel is going away: nothing left to update
