"""The errors this API raises, and the torch.distributed advice for the few Horovod features it does not have.

Unsupported features fail at once with ``HorovodUnsupportedError`` naming the torch.distributed way to do the
same thing, never with a silent approximation. The class is also an ``AttributeError`` so that
``hasattr(hvd, "Adasum")`` is simply False and ``getattr(hvd, name, default)`` works.

Errors of a collective itself are ``HorovodInternalError`` (a RuntimeError), as in Horovod, where code written for
Horovod catches them: ranks that disagree on a collective (``MismatchError``, also a ValueError), a collective
refused while a rank has joined (``JoinedRankError``), a rank outside the process set it names.
"""
from __future__ import annotations

__all__ = ["HorovodUnsupportedError", "HorovodNotInitializedError", "HorovodLaunchError", "HorovodInternalError",
           "HostsUpdatedInterrupt", "JoinedRankError", "MismatchError", "StalledError", "UNSUPPORTED", "unsupported"]


class HorovodUnsupportedError(NotImplementedError, AttributeError):
    """A Horovod feature with no faithful torch.distributed counterpart; the message says what to use instead."""


class HorovodNotInitializedError(ValueError):
    """An API call before ``init()`` (or after ``shutdown()``), like Horovod's ValueError."""


class HorovodLaunchError(RuntimeError):
    """``init()`` found neither a process group nor the environment variables to create one."""


class HorovodInternalError(RuntimeError):
    """A collective failed (Horovod's name: code written for Horovod catches it, elastic code included)."""


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod elastic's signal that the hosts changed; it exists so that code catching it imports, and is never
    raised here (``hvd.elastic`` keeps the number of ranks: a lost rank restarts the run on the same N)."""

    def __init__(self, skip_sync: bool = False) -> None:
        super().__init__("the set of hosts changed")
        self.skip_sync = skip_sync


class JoinedRankError(HorovodInternalError):
    """A collective that Horovod refuses while some rank has called ``join()`` (all but allreduce and barrier)."""


class MismatchError(HorovodInternalError, ValueError):
    """The ranks called the same collective with different shapes, dtypes, ops, scale factors, root ranks or
    devices; raised on every rank, naming each rank's side. The process group stays usable."""


class StalledError(HorovodInternalError):
    """Every rank is waiting on a collective and no two of them wait on the same one (Horovod would hang)."""


_MPI = ("MPI is not used: this API runs on torch.distributed (gloo for CPU tensors, NCCL for CUDA tensors); "
        "mpi_enabled() and mpi_built() are False")
_TIMELINE = ("the Horovod timeline is not supported; use torch.profiler.profile (it records every collective, "
             "ours included) and export_chrome_trace() for the same Chrome trace view")

UNSUPPORTED: dict[str, str] = {
    "Adasum": "Adasum has no torch.distributed equivalent; use op=hvd.Average",
    "mpi_threads_supported": _MPI,
    "start_timeline": _TIMELINE,
    "stop_timeline": _TIMELINE,
}


def unsupported(name: str, supported: list[str]) -> HorovodUnsupportedError:
    """The error for Horovod name ``name``: the specific advice when we have it, else the list of what exists."""
    advice = UNSUPPORTED.get(name)
    if advice is not None:
        return HorovodUnsupportedError(f"hvd.{name} is not supported by jupyter_torchdist.horovod: {advice}.")
    return HorovodUnsupportedError(
        f"hvd.{name} is not provided by jupyter_torchdist.horovod (a Horovod-compatible API on torch.distributed). "
        f"Supported: {', '.join(sorted(supported))}.")
