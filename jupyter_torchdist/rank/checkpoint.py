"""What ``jt.commit`` and ``jt.restore`` (``api``) do on a rank: the state a restarted run resumes from.

Rank 0 writes each commit, once (every rank holds the same state under DDP); every rank reads the latest on a
restart, so all resume alike. A commit holds the step, each object's state (``state_dict()`` where it has one,
else the object itself, pickled) and the data position of every ``batches()`` epoch the cell has read (so a
restart resumes each epoch where the commit left it: no row repeated, none skipped). Serialising happens on the
calling thread (the state must not move under it); writing happens on a thread of its own, one commit at a time,
and its end is said to the kernel (COMMIT), which shows it and counts it for the next attempt.
"""
from __future__ import annotations

import io
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ..core import contract as C
from .checkpoint_store import Store, commit_name

__all__ = ["CheckpointError", "Checkpoints", "check_shared", "flush"]


class CheckpointError(RuntimeError):
    """The checkpoint folder cannot be used (not writable, not shared by every host, a commit unreadable)."""


def _state_of(name: str, obj: Any) -> Any:
    state_dict = getattr(obj, "state_dict", None)
    return state_dict() if callable(state_dict) else obj


def _load_into(name: str, obj: Any, saved: Any) -> None:
    import torch

    load = getattr(obj, "load_state_dict", None)
    if callable(load):
        load(saved)
    elif isinstance(obj, torch.Tensor) and isinstance(saved, torch.Tensor):
        with torch.no_grad():
            obj.copy_(saved)  # the same tensor object, its values replaced (on its own device)
    elif isinstance(obj, dict) and isinstance(saved, dict):
        obj.clear()
        obj.update(saved)
    elif isinstance(obj, list) and isinstance(saved, list):
        obj[:] = saved
    elif isinstance(obj, set) and isinstance(saved, set):
        obj.clear()
        obj.update(saved)
    else:
        raise TypeError(f"jt.restore({name}=...): a {type(obj).__name__} cannot be restored in place; commit it "
                        f"inside a dict (state={{'{name}': ...}}), or commit a tensor or an object with "
                        "load_state_dict()")


class Checkpoints:
    """This rank's commits for one run: the store, the writer thread, what the data plane says of its position."""

    def __init__(self, where: str, rank: int, post: Any, data_position: Any,
                 agree: Callable[[int], int] = lambda latest: latest) -> None:
        self.store, self.rank, self.post = Store(where), rank, post
        self.data_position = data_position      # () -> the batches() positions to commit (the data layer's)
        self.agree = agree                      # this rank's latest commit -> the one every rank restores
        self.restored: dict[str, Any] | None = None  # the data positions of the commit restored, for batches()
        self._writer: threading.Thread | None = None
        self._error: BaseException | None = None

    # -- commit -----------------------------------------------------------------------------------------------
    def commit(self, step: int, objects: dict[str, Any]) -> None:
        import torch

        self.flush()  # one commit at a time: bounded memory, and commits land in order
        if self.rank != 0:
            return
        began = time.monotonic()
        buf = io.BytesIO()
        torch.save({"step": step, "objects": {k: _state_of(k, v) for k, v in objects.items()},
                    "data": self.data_position()}, buf)
        data = buf.getvalue()
        held = time.monotonic() - began
        self._writer = threading.Thread(target=self._write, args=(step, data, held), name="jtd-commit", daemon=True)
        self._writer.start()

    def _write(self, step: int, data: bytes, held: float) -> None:
        began = time.monotonic()
        try:
            self.store.write(commit_name(step), data)
            self.store.prune()
        except BaseException as exc:
            self._error = exc
            return
        msg: C.CommitMsg = {"t": C.COMMIT, "step": step, "bytes": len(data), "seconds": held + time.monotonic() - began,
                            "at": time.time()}
        self.post(msg)

    def flush(self) -> None:
        """Wait for the commit being written; a failed write raises here (on the next commit, or at the cell's end)."""
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        if self._error is not None:
            error, self._error = self._error, None
            raise CheckpointError(f"jt.commit could not write to {self.store.where}: {type(error).__name__}: "
                                  f"{error}") from error

    # -- restore ----------------------------------------------------------------------------------------------
    def restore(self, objects: dict[str, Any]) -> int:
        import torch

        steps = self.store.steps()
        step = self.agree(steps[-1] if steps else -1)  # a rank that restored first must not commit before its peers
        if step < 0:                                   # have looked: each would load what it found then
            return 0
        raw = self.store.read(commit_name(step))
        saved = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=False)
        for name, obj in objects.items():
            if name not in saved["objects"]:
                raise KeyError(f"jt.restore({name}=...): the commit at step {saved['step']} has no {name!r} (it has "
                               f"{sorted(saved['objects'])}): restore the names you commit")
            _load_into(name, obj, saved["objects"][name])
        self.restored = saved.get("data") or {}
        return int(saved["step"])


def check_shared(store: Store, rank: int, world: int, run_id: str, barrier: Any) -> None:
    """Every rank writes a probe and reads everyone's: a folder that is not writable, or not the same folder on
    every host (a local path on a cluster), fails here, before the cell's code runs, naming the host."""
    host = socket.gethostname()
    probe = f".probe-{run_id}-{rank}"
    try:
        store.write(probe, host.encode())
    except OSError as exc:
        raise CheckpointError(f"rank {rank} on {host} cannot write to the checkpoint folder {store.where}: {exc}. "
                              "Give --checkpoint-dir a folder (or URL) every host can write") from None
    barrier()
    try:
        names = set(store.names())
        missing = [r for r in range(world) if f".probe-{run_id}-{r}" not in names]
        if missing:
            raise CheckpointError(f"rank {rank} on {host} cannot see what rank {missing[0]} wrote to the checkpoint "
                                  f"folder {store.where}: it is not one folder shared by every host (a local path "
                                  "on a cluster?). Give --checkpoint-dir a shared file system path or an object "
                                  "store URL (s3://, gs://, abfs://, ... through fsspec)")
    finally:
        barrier()
        store.remove(probe)


# -- the cell's end ------------------------------------------------------------------------------------------
def flush() -> None:
    """The cell is ending: the last commit is written before the rank says so."""
    from .runtime import current

    runtime = current()
    if runtime is not None and runtime.checkpoints is not None:
        runtime.checkpoints.flush()
