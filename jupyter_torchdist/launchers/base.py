"""What a launcher backend does for the rest of the package: the one small interface, one backend per file.

A backend places N ranks somewhere (Spark barrier tasks, local processes, ...), says how many it can
hold at once, starts them, and stops only what this run started. Everything else (the channel, the
rendezvous, the state, the view) is the kernel's and the same for every backend. A new backend is one
file under ``launchers/`` with a subclass of ``Launcher``, registered in ``launchers/__init__.py``.
"""
from __future__ import annotations

import abc
import importlib
import queue
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from ..core.contract import Inbound, LaunchInfo, RunPlan
from ..core.options import RunOptions

__all__ = ["Launcher", "Capacity", "DataPlane", "Backend", "register", "unregister", "backend_for", "backends"]


@dataclass(frozen=True)
class Capacity:
    """How many ranks a backend can run at once, and how many a run gets when the user names no number."""

    slots: int | None      # None: no fixed limit (local processes)
    default_ranks: int     # Horovod's num_proc=None (Spark's default parallelism)
    where: str             # in words, for errors ("this SparkSession (local[4])")


class Launcher(abc.ABC):
    """Starts the ranks of one run (or of one kept set). ``start`` returns at once; progress arrives on the inbox."""

    name: ClassVar[str]                      # the registry's name for it ("spark", "local")
    slot_noun: ClassVar[str | None] = None   # ranks hold the session's task slots while they run: what to call them

    @abc.abstractmethod
    def prepare(self, options: RunOptions) -> LaunchInfo:
        """Check the run can be placed (slots, GPUs); raise LaunchError saying what to change."""

    @abc.abstractmethod
    def start(self, plan: RunPlan, inbox: queue.SimpleQueue[Inbound]) -> None:
        """Launch every rank. When all have ended put ``Inbound(-1, BACKEND, {"t": JOB_END, ...})``."""

    @abc.abstractmethod
    def cancel(self) -> None:
        """Hard stop of everything this run started, and nothing else (idempotent; returns at once)."""

    @abc.abstractmethod
    def capacity(self) -> Capacity:
        """The ranks this backend can hold at once (less what kept ranks hold now)."""

    def lost_hosts(self, addresses: set[str]) -> None:
        """These hosts stopped answering (their ranks went silent): place nothing there again. Returns at once;
        a backend that cannot tell its scheduler leaves it to find out for itself."""
        return None


class DataPlane(Protocol):
    """Where ``batches()`` data tasks run and how they are submitted (one per kind of Spark session)."""

    master: str    # the session's master, for messages
    local: bool    # its executors run on the kernel's host
    grows: bool    # dynamic allocation: Spark asks the cluster for executors for waiting tasks

    def free_slots(self, ranks_in_slots: int) -> int:
        """Task slots a data task can use beside the run's ranks (``ranks_in_slots``) and kept ranks."""

    def default_workers(self, ranks: int, free: int) -> int:
        """Data workers when the user names no number."""

    def submit(self, job: Callable[[], None], lane: str) -> None:
        """Run ``job`` on the long-lived thread of ``lane`` (jobs of one lane run one after another)."""

    def describe(self, exc: BaseException) -> str:
        """The useful lines of an error the session raised."""

    def conf(self) -> dict[str, str]:
        """The session's settings."""

    def cancel(self, group: str) -> None:
        """Cancel the jobs of ``group`` (a data job's own), and nothing else."""

    def begin(self, group: str, what: str) -> None:
        """Jobs started on the calling thread from now on belong to ``group`` (and say ``what`` in Spark's UI)."""

    def end(self, group: str) -> None:
        """Jobs started on the calling thread no longer belong to ``group``."""

    def partitions(self, df: Any) -> int | None:
        """How many partitions ``df`` has, or None where the session cannot tell without running a job."""

    def count_rows(self, df: Any, counter: Callable[[Any], Any]) -> list[int]:
        """Rows per partition of ``df``: ``counter`` is the mapInArrow function yielding (partition, rows)."""

    def piece_runner(self, source: Any, make_producer: Callable[[dict[str, Any] | None], Any], schema: str,
                     piece_property: str) -> Callable[[dict[str, Any]], str]:
        """A function running one piece's data task over ``source``, returning its status row. ``make_producer``
        makes the mapInArrow function: given a piece (it is in the function), or None (the piece is read from
        the job's local property ``piece_property``, for sessions that have them)."""


# -- which backend runs a run ------------------------------------------------------------------------------------------
# Which backend runs a run: chosen once, from what the session is and what the user asked for.
#
# Backends are registered by name with a ``claims(options)`` test, in priority order; the first that
# claims a run gets it. A backend's module is imported only when it is chosen, so registering Spark
# does not import pyspark.
@dataclass(frozen=True)
class Backend:
    name: str
    target: str | type[Launcher]            # the class, or "package.module:Class" to import it only when chosen
    claims: Callable[[RunOptions], bool]    # does this backend take this run?
    priority: int = 0                       # higher first; the fallback has the lowest

    def launcher(self) -> Launcher:
        cls: object = self.target
        if isinstance(self.target, str):
            module, _, attr = self.target.partition(":")
            cls = getattr(importlib.import_module(module), attr)
        if not (isinstance(cls, type) and issubclass(cls, Launcher)):
            raise TypeError(f"backend {self.name!r}: {self.target} is not a Launcher subclass")
        return cls()


_backends: list[Backend] = []


def register(name: str, target: str | type[Launcher], claims: Callable[[RunOptions], bool], *,
             priority: int = 0) -> None:
    """Add (or replace) a backend. ``claims`` must be cheap and must not start anything."""
    unregister(name)
    _backends.append(Backend(name, target, claims, priority))
    _backends.sort(key=lambda b: -b.priority)


def unregister(name: str) -> None:
    _backends[:] = [b for b in _backends if b.name != name]


def backends() -> tuple[Backend, ...]:
    return tuple(_backends)


def backend_for(options: RunOptions) -> Backend:
    for backend in _backends:
        if backend.claims(options):
            return backend
    raise LookupError(f"no launcher backend takes this run (registered: {[b.name for b in _backends]})")
