"""Timestamps from inside the Spark task, the agent and the rank, without editing the package.

``instrumented_rank_task`` replaces ``launchers.spark._rank_task`` in the kernel process only (so
only profiling runs use it). It is shipped to the Spark worker by value; there, once per worker
process, it wraps a few functions of ``jupyter_torchdist.rank.agent``, ``jupyter_torchdist.rank.main``
(the names it imported from ``rank.group``, ``rank.values`` and ``channel.client``) and
``rank.client.RankClient`` so that the agent and the rank forked from that worker append
``(time, rank, mark)`` lines to ``PROBE_DIR/<run_id>.jsonl``. Then it calls the original task.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Iterator

PROBE_DIR = "/tmp/jtd-probe"


def _mark(run_id: str, rank: int, mark: str, at: float | None = None) -> None:
    line = json.dumps({"at": time.time() if at is None else at, "rank": rank, "mark": mark, "pid": os.getpid()})
    with open(os.path.join(PROBE_DIR, f"{run_id}.jsonl"), "a") as f:
        f.write(line + "\n")


def _ctx() -> dict[str, Any]:
    """Which run and rank this process is in; kept on the package module so that it survives
    re-unpickling of this module's functions in a reused worker."""
    import jupyter_torchdist

    return jupyter_torchdist.__dict__.setdefault("_probe_ctx", {"run_id": "", "rank": -1})


def _wrap(mod: Any, name: str, label: str) -> None:
    orig = getattr(mod, name)
    if getattr(orig, "_jtd_probe", False):
        return

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = _ctx()
        _mark(ctx["run_id"], ctx["rank"], f"{label}:start")
        try:
            return orig(*args, **kwargs)
        finally:
            _mark(ctx["run_id"], ctx["rank"], f"{label}:end")

    wrapper._jtd_probe = True  # type: ignore[attr-defined]
    setattr(mod, name, wrapper)


def _install() -> None:
    import torch.distributed as dist

    from jupyter_torchdist.rank import agent
    from jupyter_torchdist.rank import main as rank_main
    from jupyter_torchdist.rank.client import RankClient

    _wrap(agent, "preload", "agent.preload")
    _wrap(agent, "fork_rank", "agent.fork")
    _wrap(agent, "connect", "agent.connect")
    _wrap(agent, "_wait", "agent.wait")
    _wrap(agent, "describe_status", "agent.status")
    _wrap(rank_main, "connect", "rank.connect")
    _wrap(rank_main, "rendezvous", "rank.rendezvous")
    _wrap(rank_main, "set_env", "rank.set_env")
    _wrap(rank_main, "init_group", "rank.init_group")
    _wrap(rank_main, "run_payload", "rank.run_cell")
    _wrap(rank_main, "final_message", "rank.final_message")
    _wrap(RankClient, "send_final", "rank.finish")
    _wrap(dist, "destroy_process_group", "rank.destroy_group")
    _wrap(agent, "rank_main", "rank.main")


def instrumented_rank_task(plan: Any, local_gpus: Any, per_task: int, it: Any) -> Iterator[Any]:
    """Drop-in for ``_rank_task``: marks, then the original task (this worker's ``_rank_task``: it is patched in the
    kernel's process only)."""
    entry = time.time()
    from pyspark import BarrierTaskContext

    from jupyter_torchdist.launchers import spark as backend

    os.makedirs(PROBE_DIR, exist_ok=True)
    rank = BarrierTaskContext.get().partitionId() * per_task
    _ctx().update(run_id=plan.run_id, rank=rank)
    _mark(plan.run_id, rank, "task:entry", entry)
    _install()
    gen = backend._rank_task(plan, local_gpus, per_task, it)
    for item in gen:
        _mark(plan.run_id, rank, "task:yield")
        yield item
    _mark(plan.run_id, rank, "task:done")


def read_marks(run_id: str) -> list[dict[str, Any]]:
    path = os.path.join(PROBE_DIR, f"{run_id}.jsonl")
    try:
        with open(path) as f:
            return [json.loads(ln) for ln in f if ln.strip()]
    except OSError:
        return []
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def use_in_kernel(backend: Any) -> Callable[[], None]:
    """Swap the task function of ``backend`` (``jupyter_torchdist.launchers.spark``) in the kernel process;
    returns the undo."""
    orig = backend._rank_task
    backend._rank_task = instrumented_rank_task
    return lambda: setattr(backend, "_rank_task", orig)
