"""Whose turn it is: runs of this kernel take a backend's task slots first in, first out.

Several runs at once (background runs, a sweep's, a foreground run beside them) share the session's task slots.
A run that does not fit beside the runs already holding slots waits its turn here, in the order it came, and its
view says what it waits for (``Turns.wait``'s ``show_waiting``); it goes as soon as slots are free. What the
launcher says (its ``capacity``) is read again while runs wait: a cluster's executors come and go. A run asking for
more slots than the backend has at all is not held here: its launcher refuses it, or waits for executors, as without
other runs. A backend with no fixed slots (local processes) never makes a run wait.

The same queue bounds a sweep's runs at once (``--concurrent``): a pool of K tickets, one a run.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["Ticket", "Turns", "turns", "Outcome"]

POLL_S: Final = 0.5   # how often a waiting run reads the backend's slots again (executors come and go)
Outcome = Literal["go", "stopped", "timeout"]


@dataclass(eq=False)
class Ticket:
    """One run's ticket for one pool (a backend's task slots, a sweep's places, a kept set's turn)."""

    run: int         # the run's number (jupyter_torchdist.runs())
    need: int        # slots it holds while it runs
    pool: str        # which slots: a backend's ("spark"), or a kept set's turn ("kept ranks 1")
    what: str = "task slots"   # what a slot is, in words
    where: str = ""            # where the slots are, in words ("the Spark session"; default: the pool)


class Turns:
    """First in, first out admission to pools of slots; thread-safe."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._waiting: list[Ticket] = []
        self._held: list[Ticket] = []

    def held(self, pool: str) -> int:
        with self._cv:
            return sum(t.need for t in self._held if t.pool == pool)

    def holders(self, pool: str) -> list[Ticket]:
        with self._cv:
            return [t for t in self._held if t.pool == pool]

    def numbers(self, pool: str) -> list[int]:
        """The runs holding tickets for ``pool`` or waiting for one, holders first."""
        with self._cv:
            return [t.run for t in (*self._held, *self._waiting) if t.pool == pool]

    def wait(self, ticket: Ticket, capacity: Callable[[], int | None], *, deadline: float | None = None,
             stopped: Callable[[], bool] = lambda: False,
             show_waiting: Callable[[str], None] = lambda _: None) -> Outcome:
        """Block until ``ticket`` holds its slots ("go"), ``stopped()`` ("stopped") or ``deadline`` ("timeout").

        ``capacity()``: the pool's slots in all (None: no fixed number). ``show_waiting`` gets what the run waits for,
        each time that changes. The ticket is given back with ``release`` once its run has ended."""
        with self._cv:
            others = [t for t in (*self._held, *self._waiting) if t.pool == ticket.pool and t is not ticket]
            if not others and not stopped():
                if ticket in self._waiting:
                    self._waiting.remove(ticket)
                self._held.append(ticket)  # alone in its pool: nothing to wait for (the launcher checks the rest)
                return "go"
            if ticket not in self._waiting:
                self._waiting.append(ticket)
        said = ""
        try:
            while True:
                if stopped():
                    return "stopped"
                slots = capacity()  # outside the lock: a Spark session's answer takes a JVM call
                with self._cv:
                    if self._fits(ticket, slots):
                        self._waiting.remove(ticket)
                        self._held.append(ticket)
                        return "go"
                    text = self._why(ticket, slots or 0)
                if text != said:
                    said = text
                    show_waiting(text)
                left = None if deadline is None else deadline - time.time()
                if left is not None and left <= 0:
                    return "timeout"
                with self._cv:
                    self._cv.wait(POLL_S if left is None else min(POLL_S, left))
        finally:
            with self._cv:
                if ticket in self._waiting:
                    self._waiting.remove(ticket)
                    self._cv.notify_all()  # those behind it may go now

    def join(self, ticket: Ticket) -> None:
        """Take ``ticket``'s place in line now; its ``wait`` comes later (on a background run's own thread, which may
        start after a cell submitted later has asked for its turn: that cell still goes after it)."""
        with self._cv:
            if ticket not in self._waiting and ticket not in self._held:
                self._waiting.append(ticket)

    def leave(self, ticket: Ticket) -> None:
        """A ticket that joined the line will not wait after all (its run ended before it asked for its turn)."""
        with self._cv:
            if ticket in self._waiting:
                self._waiting.remove(ticket)
                self._cv.notify_all()

    def release(self, ticket: Ticket) -> None:
        """The run ended (or handed its slots to a longer-lived holder): the next in line may go."""
        with self._cv:
            if ticket in self._held:
                self._held.remove(ticket)
            self._cv.notify_all()

    def wake(self) -> None:
        """Something a waiting run checks changed (it was stopped): look again now."""
        with self._cv:
            self._cv.notify_all()

    def _fits(self, ticket: Ticket, slots: int | None) -> bool:
        if slots is None or ticket.need > slots:
            return True  # no fixed slots, or never enough here: the launcher decides (refuses, or waits to grow)
        first = next(t for t in self._waiting if t.pool == ticket.pool)
        used = sum(t.need for t in self._held if t.pool == ticket.pool)
        return first is ticket and ticket.need <= slots - used

    def _why(self, ticket: Ticket, slots: int) -> str:
        held = [t for t in self._held if t.pool == ticket.pool]
        used = sum(t.need for t in held)
        ahead = []
        for t in self._waiting:
            if t is ticket:
                break
            if t.pool == ticket.pool:
                ahead.append(t)
        if ticket.what == "turn":  # one at a time: a kept set's cells
            line = f"queued: waiting for the kept ranks: {_runs(held, False)} runs a cell on them"
        else:
            line = (f"queued: needs {ticket.need} {ticket.what} of {ticket.where or ticket.pool}, "
                    f"{max(0, slots - used)} of {slots} free; held by {_runs(held)}")
        return line + (f"; ahead of it: {_runs(ahead, ticket.what != 'turn')}" if ahead else "; it goes next")


def _runs(tickets: list[Ticket], needs: bool = True) -> str:
    return ", ".join(f"run {t.run}" + (f" ({t.need})" if needs else "") for t in tickets) or "nobody"


turns = Turns()  # the kernel's one queue
