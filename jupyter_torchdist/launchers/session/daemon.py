"""What our Spark Python daemon (``jupyter_torchdist._daemon``) does for itself, importing no pyspark: its import path
without the installed pyspark's own copies, and its idle pages given back to the operating system."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from typing import Final

__all__ = ["installed_copies_off_path", "give_back_file_pages", "MADV_PAGEOUT"]


# -- the daemon's import path ------------------------------------------------------------------------------------------
# Spark's daemon's import path: the installed pyspark's own zips and jars off it (``_daemon`` says why).
def installed_copies_off_path(path: list[str], pyspark_loaded: bool) -> list[str]:
    """Drop from ``path`` (in place) the files (zips, jars) inside the installed pyspark package, the same code without
    a bytecode cache; what was dropped. Nothing once pyspark is imported (its modules came from where they came)."""
    installed = next((os.path.join(entry, "pyspark") for entry in path
                      if entry and os.path.isfile(os.path.join(entry, "pyspark", "__init__.py"))), None)
    if installed is None or pyspark_loaded:
        return []
    inside = os.path.realpath(installed) + os.sep
    dropped = [entry for entry in path if os.path.isfile(entry) and os.path.realpath(entry).startswith(inside)]
    path[:] = [entry for entry in path if entry not in dropped]
    return dropped


# -- idle pages given back ---------------------------------------------------------------------------------------------
# Give an idle process's file-backed pages back to the operating system (Linux ``madvise(MADV_PAGEOUT)``).
#
# An idle Spark daemon that imported torch holds about 100 MB of library text and read-only data (libtorch_cpu and
# friends) that nothing uses until the next run. Those pages are clean: the kernel can drop them and read them back
# from the files when they are touched again (the next run forks workers and pays about a tenth of a second). Pages
# another process still maps are left alone by the kernel, so this never takes anything from a live worker.
#
# Only file-backed mappings are advised: anonymous memory would go to swap, which a teaching server rarely has, and
# the daemon's heap is what makes its forked workers warm. Where the call does not exist (not Linux, a kernel older
# than 5.4) nothing happens.
MADV_PAGEOUT: Final = 21  # <linux/mman.h>, Linux 5.4


def give_back_file_pages(maps: str = "/proc/self/maps") -> int:
    """Advise the kernel to page out every file-backed mapping of this process; how many it accepted."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        madvise = libc.madvise
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        with open(maps) as f:
            lines = f.readlines()
    except (OSError, AttributeError):
        return 0
    accepted = 0
    for start, end in _file_ranges(lines):
        if madvise(start, end - start, MADV_PAGEOUT) == 0:
            accepted += 1
    return accepted


def _file_ranges(lines: list[str]) -> list[tuple[int, int]]:
    """The address ranges of mappings backed by a file (a path; not [heap], [stack], anonymous or deleted)."""
    out = []
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not parts[5].startswith("/") or parts[5].rstrip().endswith("(deleted)"):
            continue
        lo, _, hi = parts[0].partition("-")
        out.append((int(lo, 16), int(hi, 16)))
    return out
