"""The contract's message about a profile (``--profile``): one rank's window of steps under ``torch.profiler``.

Part of the one vocabulary: ``contract.py`` imports every name here and puts the message in its unions.

* ``PROFILE`` (rank -> kernel), once per run when the rank's window closes: which steps it profiled, where its step
  time went (``core/profile_summary.py``'s shares: input, compute, communication, other) and its trace, gzipped
  Chrome trace JSON as ``torch.profiler`` wrote it (None when it was too large to send: ``note`` says so). The kernel
  writes the trace under the run's log folder; the summary goes into the view and the report.
"""
from __future__ import annotations

from typing import Final, Literal, TypedDict

__all__ = ["PROFILE", "ProfileMsg", "ProfileShares"]

PROFILE: Final = "profile"


class ProfileShares(TypedDict):
    span_s: float      # the window's wall time on this rank
    steps: int         # steps in the window
    input: float       # shares of span_s: waiting for data (a DataLoader's next batch, batches())
    compute: float     # operators and kernels
    comm: float        # collectives nothing else overlapped (all-reduce, broadcast, barrier...)
    other: float       # the rest: Python between operators, sleeps, the optimizer's bookkeeping


class ProfileMsg(TypedDict):
    t: Literal["profile"]
    first: int                   # the first and last step the window held
    last: int
    shares: ProfileShares
    trace: bytes | None          # gzipped Chrome trace JSON (TensorBoard's profiler and Perfetto open it)
    note: str | None             # what cut the window short, or why no trace came
