"""Where a rank's main thread is, as a compact stack: the user's frames in their own line numbers, the rest folded.

Asked for by the kernel (``WHERE``: the live view's Stacks control, a stall, an interrupt, ``--timeout``) and
answered on the rank's reader thread from ``sys._current_frames()``: the main thread is never disturbed, and
the answer comes whatever it is doing (blocked in a collective, sleeping, in pdb) as long as it is not holding
the GIL in native code. Frames of the cell (``Cell In[5]`` is the cell's own numbering, its magic line 1) read
"cell line 4"; other user code (a script, its modules, notebook functions) reads "train.py line 12"; frames of
Python's library, installed packages (torch) and ours are folded, a run of them one entry. Above the first
user frame there is only the machinery that runs it (the agent, Spark's worker, our runner): left out.
"""
from __future__ import annotations

import ast
import itertools
import linecache
import os
import site
import sys
import sysconfig
import time
from functools import lru_cache
from types import FrameType
from typing import Final

from ..core import contract as C
from . import collectives

__all__ = ["place_message", "frames_of", "set_cell", "is_library"]

MAX_ENTRIES: Final = 30     # entries per stack (the innermost kept; the outer ones counted)
CODE_CHARS: Final = 160
_PKG_DIR: Final = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Cell:
    filename = ""           # the running cell's filename ("Cell In[5]"): its frames read "cell line N"


_cell = _Cell()


def set_cell(filename: str) -> None:
    _cell.filename = filename


@lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    try:
        roots |= set(site.getsitepackages()) | {site.getusersitepackages()}
    except Exception:
        pass
    roots |= {p for p in sys.path if p.endswith((".zip", "site-packages", "dist-packages"))}  # pyspark.zip
    roots.add(_PKG_DIR)
    return tuple(sorted((os.path.join(r, "") for r in roots if r), key=len, reverse=True))


@lru_cache(maxsize=512)
def is_library(filename: str) -> bool:
    """Python's own modules, installed packages and ours; not the cell, a script or the user's modules."""
    if filename.startswith("<"):  # "<kept-cell-2>", "<distributed>": code the user gave us; "<string>": a -c
        return filename.startswith("<frozen") or filename == "<string>"
    return filename.startswith(_library_roots())


def _label(filename: str, line: int) -> str:
    if filename == _cell.filename:
        return f"cell line {line}"
    if filename.startswith("<") or filename.startswith("Cell In["):
        return f"{filename} line {line}"
    for root in _library_roots():
        if filename.startswith(root):
            return f"{filename[len(root):]} line {line}"
    return f"{os.path.basename(filename)} line {line}"


def _callee(segment: str) -> str:
    """What a call expression calls (``dist.all_reduce(t)`` -> ``dist.all_reduce``), or ""."""
    try:
        node = ast.parse(segment.strip(), mode="eval").body
    except SyntaxError:
        return ""
    return ast.unparse(node.func)[:80] if isinstance(node, ast.Call) else ""


def _code_and_call(frame: FrameType) -> tuple[str, str]:
    """The frame's source line, and the call it is making now (from the instruction's columns), if known."""
    code, lineno = frame.f_code, frame.f_lineno
    line = linecache.getline(code.co_filename, lineno, frame.f_globals)
    call, positions = "", getattr(code, "co_positions", None)  # Python 3.11+: the instruction's columns
    try:
        start, end, col, end_col = next(itertools.islice(positions(), frame.f_lasti // 2, None))  # type: ignore[misc]
        if start == end == lineno and col is not None and end_col is not None:
            call = _callee(line.encode()[col:end_col].decode(errors="replace"))
    except Exception:
        pass
    return line.strip()[:CODE_CHARS], call


def _entry(frame: FrameType) -> C.FrameInfo:
    code, call = _code_and_call(frame)
    return {"where": _label(frame.f_code.co_filename, frame.f_lineno), "name": frame.f_code.co_name[:80],
            "code": code, "call": call, "library": 0}


def _fold(frames: list[FrameType]) -> list[C.FrameInfo]:
    """User frames one by one; each run of library frames one entry named after its innermost frame."""
    out: list[C.FrameInfo] = []
    for library, run in itertools.groupby(frames, key=lambda f: is_library(f.f_code.co_filename)):
        group = list(run)
        if not library:
            out += [_entry(f) for f in group]
            continue
        inner = _entry(group[-1])
        inner["library"], inner["call"] = len(group), ""
        out.append(inner)
    return out


def frames_of(frame: FrameType | None) -> list[C.FrameInfo]:
    """The stack ending at ``frame``, outermost first, from the first user frame on (all of it if none)."""
    stack: list[FrameType] = []
    while frame is not None:
        stack.append(frame)
        frame = frame.f_back
    stack.reverse()
    first = next((i for i, f in enumerate(stack) if not is_library(f.f_code.co_filename)), 0)
    entries = _fold(stack[first:])
    if len(entries) > MAX_ENTRIES:
        cut = len(entries) - MAX_ENTRIES + 1
        hidden = sum(max(1, e["library"]) for e in entries[:cut])
        outer: C.FrameInfo = {"where": "...", "name": "", "code": f"{hidden} outer frames not shown", "call": "",
                              "library": hidden}
        entries = [outer, *entries[cut:]]
    return entries


def place_message(main: int) -> C.PlaceMsg:
    """Where thread ``main`` is now, and the collective it waits in (if any)."""
    frames = frames_of(sys._current_frames().get(main))
    marked = collectives.current()
    return {"t": C.PLACE, "frames": frames, "collective": marked[0] if marked else None,
            "waited_s": round(marked[1], 3) if marked else None, "at": time.time()}
