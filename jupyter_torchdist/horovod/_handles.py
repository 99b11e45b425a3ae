"""Handles: what the ``*_async`` calls return, and ``synchronize``/``poll`` on them.

A handle's collective is negotiated first (``_channel``): when the other ranks are not at the same collective yet
(Horovod matches collectives by name, so ranks may issue them in different orders), it waits, not yet on the wire,
and is launched by a later round: at the latest when ``synchronize`` needs it.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, Protocol

import torch.distributed as dist

from ._errors import HorovodInternalError
from ._request import Request


class Resolver(Protocol):
    """What a handle needs of its channel (``_channel.Channel``): a round that launches or fails it."""

    def resolve(self, handle: Handle) -> None: ...

__all__ = ["Handle", "Launcher", "Rows", "PENDING", "LAUNCHED", "DONE", "FAILED", "synchronize", "poll", "internal"]

Rows = list[list[int] | None]  # every rank's request as the round saw it (None: a rank inside join())
Launcher = Callable[[Rows | None], tuple[list[dist.Work], Callable[[], Any]]]

PENDING, LAUNCHED, DONE, FAILED = "pending", "launched", "done", "failed"


class Handle:
    """One collective: pending (negotiated, not on the wire yet), launched, done or failed."""

    __slots__ = ("request", "channel", "state", "_launcher", "_works", "_finish", "_result", "_error", "_seen_done")

    def __init__(self, request: Request, launcher: Launcher, channel: Resolver | None = None) -> None:
        self.request, self.channel, self.state = request, channel, PENDING
        self._launcher: Launcher | None = launcher
        self._works: list[dist.Work] = []
        self._finish: Callable[[], Any] | None = None
        self._result: Any = None
        self._error: BaseException | None = None
        self._seen_done = False  # complete, as seen by poll() or by a later round (see finished())

    def launch(self, rows: Rows | None) -> None:
        """Issue the data collective(s): every rank decided to, in the same round."""
        assert self._launcher is not None
        try:
            self._works, self._finish = self._launcher(rows)
        except BaseException as exc:
            self._fail_with(exc)
        self._launcher, self.state = None, LAUNCHED

    def fail(self, error: BaseException) -> None:
        self._error, self._launcher, self.state = error, None, FAILED

    def _fail_with(self, exc: BaseException) -> NoReturn:
        """Fail with ``exc`` as Horovod would see it (``internal``) and raise that."""
        error = internal(exc)
        self.fail(error)
        if error is exc:
            raise exc
        raise error from exc

    def finished(self) -> bool:
        """Over: its name may be used again (Horovod's rule). A launched collective counts once its completion was
        seen, by ``poll``/``synchronize`` or by a later round on its process set, never merely by timing: a name
        reused at once is refused whatever the speed of the wire."""
        return self.state in (DONE, FAILED) or self._seen_done

    def check_done(self) -> bool:
        """For the channel's rounds: record whether a launched collective has completed."""
        if self.state == LAUNCHED and all(work.is_completed() for work in self._works):
            self._seen_done = True
        return self.finished()

    def poll(self) -> bool:
        """True once ``wait()`` will not block: done, failed, or launched and complete. A pending collective
        (the other ranks have not reached it yet) polls False until a later collective or ``synchronize``."""
        if self.state == PENDING:
            return False
        return self.state != LAUNCHED or self.check_done()

    def wait(self) -> Any:
        """Negotiate if still pending, wait, and return the result (the same one on later calls)."""
        if self.state == PENDING:
            assert self.channel is not None
            self.channel.resolve(self)
        if self.state == FAILED:
            assert self._error is not None
            raise self._error
        if self.state == LAUNCHED:
            try:
                for work in self._works:
                    work.wait()
                assert self._finish is not None
                result = self._finish()
            except BaseException as exc:
                self._fail_with(exc)
            self._result, self._finish, self._works, self.state = result, None, [], DONE
        return self._result


def internal(exc: BaseException) -> BaseException:
    """A collective that failed on the wire (a rank died, a timeout) is Horovod's ``HorovodInternalError``, which
    code written for Horovod catches; our own errors and argument errors stay what they are."""
    if isinstance(exc, RuntimeError) and not isinstance(exc, (HorovodInternalError, NotImplementedError)):
        return HorovodInternalError(f"{type(exc).__name__}: {exc}")
    return exc


def synchronize(handle: Any) -> Any:
    """Wait for an async operation and return its result (a tensor; (tensor, splits) for alltoall with splits)."""
    if not isinstance(handle, Handle):
        raise TypeError(f"synchronize() takes a handle from an *_async call, got {type(handle).__name__}")
    return handle.wait()


def poll(handle: Any) -> bool:
    """True when the async operation is done (``synchronize`` will not block)."""
    if not isinstance(handle, Handle):
        raise TypeError(f"poll() takes a handle from an *_async call, got {type(handle).__name__}")
    return handle.poll()
