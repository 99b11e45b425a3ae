"""The one handle type the notebook holds: a run (``Run``) and a sweep of runs (``Sweep``) are both a ``Handle``.

A handle is a promise of an outcome, as ipyparallel's ``AsyncResult`` is (with ``AsyncMapResult`` beside it): the
same verbs mean the same thing and answer in the same types whatever it stands for. ``done()`` and ``wait(timeout)``
say whether it has ended; ``state`` says how it stands in words; ``result(timeout)`` gives its value or raises its
error; ``error`` is that error once it has ended without success; ``stop()`` stops whatever of it still goes and says
whether there was anything to stop. Whoever drives it calls ``_end()`` once, when its outcome is set.
"""
from __future__ import annotations

import threading
from typing import Any

__all__ = ["Handle"]


class Handle:
    """What every handle does: wait for its end, say its state, give its outcome, stop."""

    def __init__(self) -> None:
        self._ended = threading.Event()
        self._error: BaseException | None = None

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
        """Its outcome is set: everybody waiting wakes."""
        self._ended.set()
