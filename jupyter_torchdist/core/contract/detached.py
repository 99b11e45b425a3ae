"""What a kernel asks a detached run's runner over its socket (``kernel/detached/``), and what it answers.

* ``LOOK``: how the run stands (``LookAnswer``: its state, its latest frame for the views, where it runs).
* ``STOP_ASKED``: stop the run (``StopAnswer``: whether it was still going), as ``run.stop()`` does in a kernel.

Only the runner's owner is answered (the socket checks the other end's uid); frames are the channel's (a length and
a pickle), at most ``MAX_REQUEST_BYTES`` a request.
"""
from __future__ import annotations

from typing import Any, Final, Literal, TypedDict, Union

__all__ = ["LOOK", "STOP_ASKED", "LookMsg", "StopAskedMsg", "RunnerRequest", "LookAnswer", "StopAnswer",
           "MAX_REQUEST_BYTES"]

LOOK: Final = "runner_look"
STOP_ASKED: Final = "runner_stop"
MAX_REQUEST_BYTES: Final = 1 << 16


class LookMsg(TypedDict):
    t: Literal["runner_look"]


class StopAskedMsg(TypedDict):
    t: Literal["runner_stop"]
    by: str


RunnerRequest = Union[LookMsg, StopAskedMsg]


class LookAnswer(TypedDict):
    state: str                       # queued, running, done, failed, stopped (the runner's Run)
    frame: dict[str, Any] | None     # the latest snapshot its view drew (``views.schema.RunSnapshot``)
    where: str | None
    title: str
    n: int
    final: bool                      # the frame is the run's last


class StopAnswer(TypedDict):
    stopped: bool
