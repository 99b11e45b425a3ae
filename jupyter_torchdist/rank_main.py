"""The body of one rank's process: rendezvous through the kernel, run the cell, report, tear down.

Runs in a process forked for this run only (from a warm Spark Python worker or our local
zygote), so nothing of one run survives into the next, and ``os._exit`` ends it.
"""
from __future__ import annotations

import datetime
import os
import socket
import time
import traceback
from dataclasses import dataclass
from typing import Any

from . import protocol as P
from . import rank_api
from .cell import register_source
from .rank_client import RankClient, connect
from .tls import TLSPin

__all__ = ["RunPlan", "rank_main"]

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class RunPlan:
    """Everything every rank needs, identical for all ranks (the rank number comes separately)."""
    run_id: str
    world_size: int
    address: tuple[str, int]
    secret: bytes
    payload: bytes
    filename: str
    source: str
    gpu: bool
    threads: int | None
    max_value_bytes: int
    all_ranks: bool
    loopback: bool  # every rank is on the kernel's host: keep all traffic on 127.0.0.1
    pg_timeout_s: float = 1800.0
    tls: TLSPin | None = None  # the run's pinned certificate when the channel runs over TLS


def _identity(x: Any) -> Any:
    return x


def _dumps_value(value: Any) -> bytes:
    """cloudpickle the value with every tensor moved to the CPU."""
    import cloudpickle
    import io

    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        torch = None  # type: ignore[assignment]

    class CpuPickler(cloudpickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            if torch is not None and isinstance(obj, torch.Tensor) and obj.device.type != "cpu":
                if isinstance(obj, torch.nn.Parameter):
                    return torch.nn.Parameter, (obj.detach().cpu(), obj.requires_grad)
                return _identity, (obj.detach().cpu(),)
            return super().reducer_override(obj)

    buf = io.BytesIO()
    CpuPickler(buf, protocol=5).dump(value)
    return buf.getvalue()


def _user_traceback(exc: BaseException, filename: str) -> str:
    """The traceback from the cell's own frame down: none of our frames, the cell's line numbers."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        if not tb.tb_frame.f_code.co_filename.startswith(_PKG_DIR):
            break
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))


def _summary(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:500]}" if text else type(exc).__name__


def _rendezvous(sock: socket.socket, plan: RunPlan, rank: int) -> tuple[dict[str, Any], Any]:
    """Tell the kernel who we are (rank 0: where its store listens) and learn the rendezvous."""
    import torch.distributed as dist

    ip = sock.getsockname()[0]
    bind_ip = "127.0.0.1" if plan.loopback else ip
    store = None
    hello: dict[str, Any] = {"t": "hello", "host": socket.gethostname(), "ip": bind_ip, "pid": os.getpid()}
    if rank == 0:
        listener = socket.socket(socket.AF_INET6 if ":" in bind_ip else socket.AF_INET)
        listener.bind((bind_ip, 0))
        listener.listen(max(128, plan.world_size))
        hello["store_port"] = listener.getsockname()[1]
        store = dist.TCPStore(bind_ip, hello["store_port"], plan.world_size, True, wait_for_workers=False,
                              timeout=datetime.timedelta(seconds=plan.pg_timeout_s),
                              master_listen_fd=listener.detach())
    P.send_frame(sock, hello)
    rdv = P.recv_frame(sock, 1 << 20)
    if not isinstance(rdv, dict) or rdv.get("t") != "rendezvous":
        raise RuntimeError(f"rank {rank}: the kernel ended the run before it started ({rdv!r})")
    if store is None:
        store = dist.TCPStore(rdv["master_addr"], rdv["master_port"], plan.world_size, False,
                              timeout=datetime.timedelta(seconds=plan.pg_timeout_s))
    return rdv, store


def _set_env(plan: RunPlan, rank: int, rdv: dict[str, Any], gpu_address: str | None) -> str:
    env = {
        "RANK": rank, "WORLD_SIZE": plan.world_size, "LOCAL_RANK": rdv["local_rank"],
        "LOCAL_WORLD_SIZE": rdv["local_world_size"], "GROUP_RANK": rdv.get("group_rank", 0),
        "MASTER_ADDR": rdv["master_addr"], "MASTER_PORT": rdv["master_port"],
    }
    os.environ.update({k: str(v) for k, v in env.items()})
    if plan.loopback:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    device = "cpu"
    if plan.gpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu_address)
        device = "cuda:0"
    os.environ[rank_api.DEVICE_ENV] = device
    return device


def _init_group(plan: RunPlan, rank: int, store: Any, device: str) -> Any:
    import torch
    import torch.distributed as dist

    threads = plan.threads or max(1, (os.cpu_count() or 1) // max(1, int(os.environ["LOCAL_WORLD_SIZE"])))
    torch.set_num_threads(threads)
    if plan.gpu:
        torch.cuda.set_device(0)
    backend = "nccl" if plan.gpu else "gloo"
    kwargs: dict[str, Any] = {}
    if plan.gpu:
        kwargs["device_id"] = torch.device(device)
    dist.init_process_group(backend, store=store, rank=rank, world_size=plan.world_size,
                            timeout=datetime.timedelta(seconds=plan.pg_timeout_s), **kwargs)
    original = dist.init_process_group

    def init_once(*args: Any, **kw: Any) -> None:
        """Tutorial code calls init_process_group itself: the group is already up, keep it."""
        if dist.is_initialized():
            return None
        return original(*args, **kw)

    destroy = dist.destroy_process_group

    def destroy_later(group: Any = None) -> None:
        """The default group is ours: it goes when the process ends, not in the middle of the code.

        Destroying it from Python can deadlock (torch drops the last reference while holding the GIL
        and joins gloo's threads, one of which needs the GIL to free a finished collective's tensors).
        """
        if group is not None and group is not dist.GroupMember.WORLD:
            destroy(group)

    dist.init_process_group = init_once  # type: ignore[assignment]
    dist.destroy_process_group = destroy_later  # type: ignore[assignment]
    return original


def _run_cell(plan: RunPlan, rank: int) -> tuple[str, Any]:
    from .capture import unpack

    register_source(plan.filename, plan.source)
    fn, args, kwargs = unpack(plan.payload)
    try:
        return "ok", fn(*args, **kwargs)
    except SystemExit as exc:  # a script calling sys.exit
        code = exc.code
        if code in (None, 0):
            return "ok", None
        return "exit", code
    except BaseException as exc:  # noqa: BLE001 - every failure is reported, then the process ends
        return "error", exc


def _final_message(plan: RunPlan, rank: int, outcome: str, value: Any) -> dict[str, Any]:
    now = time.time()
    if outcome == "error":
        return {"t": "failed", "summary": _summary(value), "traceback": _user_traceback(value, plan.filename),
                "at": now}
    if outcome == "exit":
        return {"t": "failed", "summary": f"SystemExit: the script exited with code {value}", "traceback": "",
                "at": now, "code": value}
    msg: dict[str, Any] = {"t": "result", "value": None, "repr": None, "at": now}
    if rank == 0 or plan.all_ranks:
        try:
            data = _dumps_value(value)
        except Exception as exc:
            return {"t": "failed", "at": now, "traceback": "",
                    "summary": f"the cell's value ({type(value).__name__}) could not be pickled to bring it back: "
                               f"{_summary(exc)}. Return plain data instead (numbers, lists, tensors, "
                               "a state_dict: e.g. model.module.state_dict() rather than the DDP model)."}
        if len(data) > plan.max_value_bytes:
            from .capture import human_bytes
            return {"t": "failed", "at": now, "traceback": "",
                    "summary": f"the cell's value is {human_bytes(len(data))}, over the limit of "
                               f"{human_bytes(plan.max_value_bytes)} (--max-value-mb). Save it on the rank "
                               "(torch.save(obj, path) under `if jupyter_torchdist.is_main():`) and return the path."}
        msg["value"] = data
        try:
            msg["repr"] = repr(value)[:2000]
        except Exception:
            msg["repr"] = f"<{type(value).__name__}>"
    return msg


def rank_main(plan: RunPlan, rank: int, gpu_address: str | None = None) -> int:
    """Run one rank to the end. Returns the process exit code; never raises."""
    from .iocapture import FdCapture
    from .tqdm_bridge import install as install_tqdm

    sock = connect(plan.address, plan.secret, rank, P.ROLE_RANK, tls=plan.tls)
    rdv, store = _rendezvous(sock, plan, rank)
    device = _set_env(plan, rank, rdv, gpu_address)
    client = RankClient(sock)
    capture = FdCapture(lambda stream, text, at: client.post_log({"t": "log", "stream": stream, "text": text,
                                                                  "at": at}))
    rank_api._sink.post = client.post_progress
    install_tqdm(rank_api.report)
    outcome: tuple[str, Any]
    try:
        client.post_progress({"t": "state", "state": "starting"})
        _init_group(plan, rank, store, device)
        client.post_progress({"t": "state", "state": "running"})
        outcome = _run_cell(plan, rank)
    except BaseException as exc:  # noqa: BLE001 - rendezvous or group setup failed
        outcome = ("error", exc)
    finally:
        capture.close()
        rank_api._sink.post = None
    final = _final_message(plan, rank, *outcome)
    client.finish([final])  # our failure reaches the kernel before any peer's echo of it
    # No destroy_process_group: the process ends with os._exit right after this (forking.fork_rank), which
    # frees the group without the GIL deadlock a Python-side destroy can hit, and 10-20 ms sooner.
    return 0 if final["t"] == "result" else 1
