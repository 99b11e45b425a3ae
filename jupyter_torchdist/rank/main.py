"""The body of one rank's process: rendezvous through the kernel, run the cell, report, end.

Runs in a process forked for this run only (from a warm Spark Python worker or our local
zygote), so nothing of one run survives into the next, and ``os._exit`` ends it. Kept ranks
(``RunPlan.keep``) run their first cell, then wait for the next (``kept.serve_cells``).
"""
from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import cloudpickle

from ..core import contract as C
from ..core.travel import register_source
from ..core.travel import unfit
from ..core.gpus import cuda_unfit
from ..channel import protocol as P
from ..channel.handshake import connect
from ..core.contract import RunPlan
from ..core.contract.code import CodeShip
from . import api as rank_api
from . import collectives, debugger, places as where, preemption
from .allocator import tune_allocator
from .checkpoint import Checkpoints, check_shared
from .checkpoint import flush as flush_commits
from .client import RankClient
from .code_setup import CodeSetup, CodeSetupError, fetcher, refresh, set_up
from .group import cpu_group, init_group, rendezvous, set_env
from .kept_payload import Namespace, run_job
from .link import KernelLink
from .profiler import StepProfiler
from .runtime import RankRuntime, current, install
from .resource_sampler import UsageSampler
from .values import final_message

__all__ = ["rank_main", "run_payload", "serve_cells"]


def run_payload(payload: bytes, filename: str, source: str) -> tuple[str, Any]:
    """Call the shipped function: ("ok", value), ("exit", code) for a script's sys.exit, or ("error", exc)."""
    register_source(filename, source)
    try:
        fn, args, kwargs = cloudpickle.loads(payload)
        return "ok", fn(*args, **kwargs)
    except SystemExit as exc:  # a script calling sys.exit
        code = exc.code
        return ("ok", None) if code in (None, 0) else ("exit", code)
    except BaseException as exc:
        return "error", exc


class _Reporting:
    """While a cell runs: this process's output and report() go to the kernel."""

    def __init__(self, client: RankClient, profile: tuple[int, int] | None = None, gpu: bool = False,
                 max_bytes: int = 0) -> None:
        from .output import FdCapture

        self.capture = FdCapture(client.post_log)
        rank_api._sink.post = client.post_progress
        self.profiler: StepProfiler | None = None
        if profile is not None:
            self.profiler = StepProfiler(profile, gpu, client.post, max_bytes)
            rank_api._sink.step = self.profiler.on_report
            self.profiler.begin_cell()

    def close(self) -> None:
        rank_api._sink.step = None
        if self.profiler is not None:
            self.profiler.close()
        self.capture.close()
        rank_api._sink.post = None
        runtime = current()
        if runtime is not None:
            runtime.usage.sample()  # the cell's last numbers go with its outcome


def _call_kept(payload: bytes, ns: Namespace, guard: Any) -> tuple[str, Any]:
    """Run a kept cell's payload in ``ns``; SIGINT raises only while its own code runs."""
    try:
        guard.running = True
        try:
            value = run_job(payload, ns)
        finally:
            guard.running = False
        return "ok", value
    except KeyboardInterrupt as exc:
        return "interrupted", exc
    except SystemExit as exc:
        return ("ok", None) if exc.code in (None, 0) else ("exit", exc.code)
    except BaseException as exc:
        return "error", exc


def _flushed(outcome: tuple[str, Any]) -> tuple[str, Any]:
    """A cell that ended well has its last jt.commit written before it says so (a failed write is its error)."""
    if outcome[0] == "ok":
        try:
            flush_commits()
        except BaseException as exc:
            return "error", exc
    return outcome


def _ended(outcome: tuple[str, Any], filename: str) -> tuple[tuple[str, Any], float]:
    """How the cell ended and when: a failure first offers its post-mortem (--pdb); pdb's q is an interrupt."""
    at = time.time()
    if outcome[0] == "error":
        debugger.offer_post_mortem(outcome[1], filename)
    return debugger.quit_outcome(outcome), at


def _final(outcome: tuple[str, Any], at: float, *, filename: str, send_value: bool,
           max_bytes: int) -> C.FinalMessage:
    final = final_message(*outcome, filename=filename, send_value=send_value, max_bytes=max_bytes)
    if final["t"] == C.FAILED:
        final["at"] = at  # when it raised, not when a post-mortem ended: the root cause is judged by it
    return final


def _run_kept_cell(cell: C.CellMsg, ns: Namespace, guard: Any, *, client: RankClient, rank: int,
                   code: CodeSetup | None = None, fetch: Callable[[str], bytes] | None = None) -> C.FinalMessage:
    reloaded = _reload_edited(code, cell.get("code"), fetch) if cell["cell"] > 1 else []
    register_source(cell["filename"], cell["source"])
    _begin_cell(cell["cell"])
    where.set_cell(cell["filename"])
    debugger.begin_cell(bool(cell.get("post_mortem")))
    reporting = _Reporting(client)
    try:
        if reloaded and rank == 0:  # the cell says which modules it runs anew, as %autoreload would
            print(f"jupyter-torchdist: reloaded {', '.join(reloaded)} (edited since the last cell)", file=sys.stderr)
        client.post({"t": C.STATE, "state": "running"})
        outcome, at = _ended(_flushed(_call_kept(cell["payload"], ns, guard)), cell["filename"])
        debugger.remember(outcome)
        if code is not None:
            code.note_loaded()  # the modules this cell imported, as they are now: a later edit is measured from here
    finally:
        reporting.close()
    return _final(outcome, at, filename=cell["filename"], send_value=rank == 0 or cell["all_ranks"],
                  max_bytes=cell["max_value_bytes"])


def _reload_edited(code: CodeSetup | None, ship: CodeShip | None, fetch: Callable[[str], bytes] | None) -> list[str]:
    """Kept ranks: the notebook's code as of this cell, and the modules edited since the last one reloaded."""
    if code is None or ship is None or fetch is None:
        return []
    try:
        return refresh(code, ship, fetch)
    except Exception as exc:  # the cell runs all the same, on the code as it was; say why
        print(f"jupyter-torchdist: could not reload the notebook's edited modules: {exc}", file=sys.stderr)
        return []


def _begin_cell(cell: int) -> None:
    """Per-cell numbers (batches() epochs, time waiting for data) start again with each cell."""
    runtime = current()
    if runtime is not None:
        runtime.cell = cell


def _one_shot(plan: RunPlan, rank: int, store: Any, device: str, client: RankClient) -> C.FinalMessage:
    reporting = _Reporting(client, plan.profile, plan.gpu, plan.max_value_bytes)
    outcome: tuple[str, Any]
    at = time.time()
    try:
        client.post({"t": C.STATE, "state": "starting"})
        init_group(plan, rank, store, device)
        _checkpoints(plan, rank, client)
        client.post({"t": C.STATE, "state": "running"})
        outcome, at = _ended(_flushed(run_payload(plan.payload, plan.filename, plan.source)), plan.filename)
    except BaseException as exc:
        outcome = ("error", exc)
    finally:
        reporting.close()
    return _final(outcome, at, filename=plan.filename, send_value=rank == 0 or plan.all_ranks,
                  max_bytes=plan.max_value_bytes)


def _checkpoints(plan: RunPlan, rank: int, client: RankClient) -> None:
    """With a checkpoint folder, jt.commit and jt.restore work: the folder is checked writable and shared first."""
    if plan.checkpoint is None:
        return
    import torch.distributed as dist

    runtime = current()
    assert runtime is not None  # installed before the group forms

    def data_position() -> Any:
        positions = getattr(runtime.data, "positions", None)  # the data layer's, once batches() ran
        return positions() if callable(positions) else {}

    # a commit is told at once: the kernel's word of where a restart resumes must not wait in a rank that dies next
    checkpoints = Checkpoints(plan.checkpoint, rank, functools.partial(client.post, urgent=True), data_position,
                              _fewest_steps if plan.world_size > 1 else lambda latest: latest)
    if plan.world_size > 1:
        check_shared(checkpoints.store, rank, plan.world_size, plan.run_id,
                     functools.partial(dist.barrier, group=cpu_group()))
    runtime.checkpoints = checkpoints


def _fewest_steps(latest: int) -> int:
    """The latest commit every rank found (``jt.restore`` is a collective, as ``jt.commit`` is called by every rank)."""
    import torch
    import torch.distributed as dist

    agreed = torch.tensor([latest], dtype=torch.int64)
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN, group=cpu_group())
    return int(agreed.item())


def _kept(plan: RunPlan, rank: int, store: Any, device: str, link: KernelLink, client: RankClient,
          code: CodeSetup | None) -> int:
    try:
        client.post({"t": C.STATE, "state": "starting"})
        init_group(plan, rank, store, device)
        _checkpoints(plan, rank, client)
    except BaseException as exc:
        final = final_message("error", exc, filename=plan.filename, send_value=False, max_bytes=0)
        final["cell"] = 1
        client.send_final([final])
        return 1
    first: C.CellMsg = {"t": C.CELL, "cell": 1, "payload": plan.payload, "filename": plan.filename,
                        "source": plan.source, "all_ranks": plan.all_ranks, "max_value_bytes": plan.max_value_bytes,
                        "post_mortem": plan.post_mortem}
    if code is not None:
        code.note_loaded()
    return serve_cells(first, link, client, rank, functools.partial(_run_kept_cell, client=client, rank=rank,
                                                                    code=code, fetch=_fetch(plan, rank)))


def _debuggable(plan: RunPlan, link: KernelLink, client: RankClient) -> None:
    """Where this thread is, on the kernel's asking; its collectives marked; breakpoint() in the notebook."""
    main = threading.get_ident()
    collectives.install(main)
    debugger.install()
    debugger.begin_cell(plan.post_mortem)
    where.set_cell(plan.filename)
    link.on_where(lambda: client.post(where.place_message(main), urgent=True))


def rank_main(plan: RunPlan, rank: int, gpu_address: str | None = None) -> int:
    """Run one rank to the end. Returns the process exit code; never raises."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a forked worker may have ignored it
    tune_allocator()
    sock = connect(plan.address, plan.secret, rank, P.ROLE_RANK, tls=plan.tls)
    why = unfit(plan.versions) or (cuda_unfit() if plan.gpu else None)
    if why is not None:  # said before anything of the kernel's is unpickled, or any peer is waited for
        RankClient(sock).send_final([final_message("error", RuntimeError(why), filename=plan.filename,
                                                   send_value=False, max_bytes=0)])
        return 1
    try:  # the notebook's code, files and packages here, before any peer is waited for
        code = None if plan.code is None else set_up(plan.code, _fetch(plan, rank), f"{plan.run_id}-{plan.attempt}",
                                                     lenient=plan.offline)
    except Exception as exc:
        RankClient(sock).send_final([_setup_failed(exc)])
        return 1
    try:
        return _rank_body(plan, rank, gpu_address, sock, code)
    finally:
        if code is not None:
            code.close()


def _fetch(plan: RunPlan, rank: int) -> Callable[[str], bytes]:
    return fetcher(plan.address, plan.secret, rank, plan.tls)


def _setup_failed(exc: Exception) -> C.FailedMsg:
    """The run's code could not be set up on this host: what to do in the summary, pip's own lines below it."""
    text = str(exc)
    head, _, rest = text.partition("\n")
    return {"t": C.FAILED, "summary": f"{type(exc).__name__}: {head}", "at": time.time(),
            "traceback": (getattr(exc, "details", "") or rest) if isinstance(exc, CodeSetupError) else
            "".join(traceback.format_exception(exc))}


def _rank_body(plan: RunPlan, rank: int, gpu_address: str | None, sock: Any, code: CodeSetup | None) -> int:
    """From the rendezvous to the end of the rank's cell (or, kept, its last cell)."""
    from .trainer_bridge import install as install_trainers
    from .tqdm_bridge import install as install_tqdm

    rdv, store = rendezvous(sock, plan, rank, gpu_address)
    bind_ip = "127.0.0.1" if plan.loopback else sock.getsockname()[0]
    device = set_env(plan, rank, rdv, bind_ip)
    client = RankClient(sock, plan.world_size, every_point=plan.every_point and rank == 0)
    for warning in code.warnings if code is not None and os.environ.get("LOCAL_RANK") == "0" else ():  # once a host
        client.post_log("stderr", f"jupyter-torchdist warning: {warning}\n", time.time())
    link = KernelLink(sock)
    preemption.install(lambda msg: client.post(msg, urgent=True))
    install(RankRuntime(plan, rank, client, link, bind_ip, UsageSampler(client.post_usage, gpu=plan.gpu)))
    install_tqdm(rank_api.report)
    install_trainers(rank_api.report)
    if plan.argv:  # the cell sees the notebook's sys.argv, not the Spark worker's or the local launcher's
        sys.argv = list(plan.argv)
    _debuggable(plan, link, client)
    if plan.keep:
        return _kept(plan, rank, store, device, link, client, code)
    final = _one_shot(plan, rank, store, device, client)
    client.send_final([final])  # our failure reaches the kernel before any peer's echo of it
    # Stay until the kernel says every rank has ended its cell (or is gone). A rank that exits early takes
    # its end of every gloo connection with it, and rank 0 the TCPStore: a peer still forming the group, or
    # still reading a collective's last bytes, then fails with "Connection reset by peer" (seen with 64
    # ranks on one host and a cell that is just ``1``).
    link.wait_release()
    # No destroy_process_group: the process ends with os._exit right after this (forking.fork_rank), which
    # frees the group without the GIL deadlock a Python-side destroy can hit, and 10-20 ms sooner.
    return 0 if final["t"] == C.RESULT else 1


# -- kept ranks: the next cell, in the same namespace ------------------------------------------------------------------
# Kept ranks: after the first cell, a rank waits for the next one and runs it in the same namespace.
#
# A kept cell runs like a notebook cell: module-level code in the rank's own globals, so ``model``,
# ``opt`` and ``step`` assigned in one cell are there in the next; a trailing expression is the value.
# The kernel ships the notebook values a cell reads that the rank does not define; names the rank's own
# code defined win (``Namespace.take``). The process group stays up between cells.
#
# An interrupt (``INTERRUPT`` to the agent, which sends SIGINT) raises ``KeyboardInterrupt`` in the cell's
# Python code only; between cells it is ignored, so a late one cannot kill the loop.
class _Interruptible:
    """SIGINT raises KeyboardInterrupt while a cell runs, and is ignored between cells."""

    running = False

    def __init__(self) -> None:
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self.running:
            raise KeyboardInterrupt


def serve_cells(first: C.CellMsg, link: KernelLink, client: RankClient, rank: int,
                run_cell: Callable[[C.CellMsg, Namespace, _Interruptible], C.FinalMessage]) -> int:
    """Run ``first``, then every cell the kernel sends, until it closes the channel. Returns the exit code.

    ``run_cell(cell_msg, namespace, guard)`` runs one cell and returns its final message.
    """
    ns, guard = Namespace(), _Interruptible()
    cell: C.CellMsg | None = first
    while cell is not None:
        final = run_cell(cell, ns, guard)
        final["cell"] = cell["cell"]
        if rank == 0 and final["t"] == C.RESULT:
            final["names"] = sorted(ns.own_names())
        client.send_final([final])
        register_source(cell["filename"], cell["source"])  # keep tracebacks of earlier cells readable
        cell = link.next_cell()
    return 0
