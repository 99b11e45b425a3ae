"""A rank joins the run: rendezvous through the kernel's channel, then the default process group.

Rank 0 opens the TCPStore on a socket it already bound and tells the kernel the port; the kernel
tells every rank where the store is and its place on its host. No Spark ``allGather`` (it cost
about a second a run), and the group is up before the user's code starts.
"""
from __future__ import annotations

import datetime
import fcntl
import os
import socket
import struct
from typing import Any, cast

from ..core import contract as C
from ..channel import protocol as P
from ..core.contract import RunPlan
from ..core.gpus import DEVICE_ENV, device_env, device_scope, is_rocm

__all__ = ["rendezvous", "set_env", "init_group", "cpu_group", "GPU_BACKEND", "interface_of", "choose_interfaces"]

# Under --gpu the default group carries both: NCCL for CUDA tensors, gloo for CPU ones (metrics, objects, Horovod's
# ``hvd.allreduce(torch.tensor(loss))``), which an NCCL-only group refuses ("No backend type associated with device
# type cpu"). It is what ``init_process_group()`` without a backend gives on a CUDA machine.
GPU_BACKEND = "cpu:gloo,cuda:nccl"


def _open_store(plan: RunPlan, bind_ip: str) -> tuple[int, Any]:
    """Rank 0: a TCPStore server on a port bound here first (so the port is known before anyone connects)."""
    import torch.distributed as dist

    listener = socket.socket(socket.AF_INET6 if ":" in bind_ip else socket.AF_INET)
    listener.bind((bind_ip, 0))
    listener.listen(max(128, plan.world_size * 2))
    port = listener.getsockname()[1]
    store = dist.TCPStore(bind_ip, port, plan.world_size, True,  # type: ignore[attr-defined]
                          wait_for_workers=False, timeout=datetime.timedelta(seconds=plan.pg_timeout_s),
                          master_listen_fd=listener.detach())
    return port, store


def rendezvous(sock: Any, plan: RunPlan, rank: int, gpu: str | None) -> tuple[C.RendezvousMsg, Any]:
    """Tell the kernel who we are (rank 0: where its store listens; under --gpu: our GPU and which GPUs we can
    open) and learn the rendezvous."""
    import torch.distributed as dist

    bind_ip = "127.0.0.1" if plan.loopback else sock.getsockname()[0]
    store = None
    hello: C.HelloMsg = {"t": C.HELLO, "host": socket.gethostname(), "ip": bind_ip, "pid": os.getpid()}
    if plan.gpu and gpu is not None:
        hello["gpu"], hello["scope"] = gpu, device_scope()
    if plan.per_node:
        hello["node"] = rank // plan.per_node  # its Spark task: the ranks of a task are consecutive
    if rank == 0:
        hello["store_port"], store = _open_store(plan, bind_ip)
    P.send_frame(sock, hello)
    frame = P.recv_frame(sock, 1 << 20)
    while isinstance(frame, dict) and frame.get("t") == C.WHERE:  # asked as the group formed: it has no answer yet
        frame = P.recv_frame(sock, 1 << 20)
    if not isinstance(frame, dict) or frame.get("t") != C.RENDEZVOUS:
        raise RuntimeError(f"rank {rank}: the kernel ended the run before it started ({frame!r})")
    rdv = cast("C.RendezvousMsg", frame)
    if store is None:
        store = dist.TCPStore(rdv["master_addr"], rdv["master_port"],  # type: ignore[attr-defined]
                              plan.world_size, False, timeout=datetime.timedelta(seconds=plan.pg_timeout_s))
    return rdv, store


def set_env(plan: RunPlan, rank: int, rdv: C.RendezvousMsg, bind_ip: str) -> str:
    """The environment torchrun would give (frameworks read it); returns this rank's device name.

    Under --gpu the rank sees its node's ranks' GPUs (the rendezvous's list, local rank order) and its own is
    ``cuda:LOCAL_RANK``: set before anything in this process touches CUDA, which reads the variables once
    (``gpus.device_env``: HIP's too on a ROCm build, and CUDA_DEVICE_ORDER=PCI_BUS_ID unless set)."""
    env = {
        "RANK": rank, "WORLD_SIZE": plan.world_size, "LOCAL_RANK": rdv["local_rank"],
        "LOCAL_WORLD_SIZE": rdv["local_world_size"], "GROUP_RANK": rdv.get("group_rank", 0),
        "GROUP_WORLD_SIZE": rdv.get("num_hosts", 1),
        "MASTER_ADDR": rdv["master_addr"], "MASTER_PORT": rdv["master_port"],
        # horovodrun's names for the same, which Horovod scripts sometimes read instead of calling hvd.rank()
        "HOROVOD_RANK": rank, "HOROVOD_SIZE": plan.world_size, "HOROVOD_LOCAL_RANK": rdv["local_rank"],
        "HOROVOD_LOCAL_SIZE": rdv["local_world_size"], "HOROVOD_CROSS_RANK": rdv.get("group_rank", 0),
        "HOROVOD_CROSS_SIZE": rdv.get("num_hosts", 1),
    }
    os.environ.update({k: str(v) for k, v in env.items()})
    global _host_ranks
    _host_ranks = rdv["host_ranks"]  # the host's cores are shared by all of them, not by its node's alone
    if plan.loopback:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    else:
        choose_interfaces(bind_ip)  # not the interface the host's own name resolves to (127.0.1.1 on Debian)
    device = "cpu"
    if plan.gpu:
        os.environ.update(device_env(rdv["gpus"], os.environ, is_rocm()))
        device = f"cuda:{rdv['local_rank']}"
    os.environ[DEVICE_ENV] = device
    return device


def _keep_default_group() -> None:
    """Tutorial code calls init_process_group and destroy_process_group itself: the group is ours, keep it.

    Destroying it from Python can deadlock (torch drops the last reference while holding the GIL
    and joins gloo's threads, one of which needs the GIL to free a finished collective's tensors).
    The default group goes when the process ends.
    """
    import torch.distributed as dist

    original_init, original_destroy = dist.init_process_group, dist.destroy_process_group

    def init_once(*args: Any, **kw: Any) -> None:
        if dist.is_initialized():
            return None
        return original_init(*args, **kw)

    def destroy_later(group: Any = None) -> None:
        if group is not None and group is not dist.GroupMember.WORLD:
            original_destroy(group)

    dist.init_process_group = init_once
    dist.destroy_process_group = destroy_later


def _answer_nccl() -> None:
    """``dist.get_backend()`` answers "nccl" for the groups whose backend we chose, as it would under torchrun's
    ``init_process_group("nccl")``: the default group and the groups made from it without naming a backend (they
    inherit both of its backends). Code checks that answer (``== "nccl"``) to decide it runs on GPUs; torch's own
    ``get_backend`` (``distributed_c10d``'s, which torch itself reads to make subgroups) still says both."""
    import torch.distributed as dist

    real_get, real_new = dist.get_backend, dist.new_group
    ours: list[Any] = []  # groups made without a backend named (kept alive: they live until the process ends)

    def get_backend(group: Any = None) -> Any:
        answer = real_get(group)
        if str(answer) == GPU_BACKEND and (group is None or group is dist.GroupMember.WORLD
                                           or any(g is group for g in ours)):
            return dist.Backend(dist.Backend.NCCL)
        return answer

    def new_group(*args: Any, **kw: Any) -> Any:
        group = real_new(*args, **kw)
        if (args[2] if len(args) > 2 else kw.get("backend")) is None:
            ours.append(group)
        return group

    dist.get_backend = get_backend
    dist.new_group = new_group


def _use_gpu(device: str) -> Any:
    """Make this rank's own GPU the current device, or say plainly why it cannot be (naming the host)."""
    import torch

    index, count = int(device.split(":")[1]), torch.cuda.device_count()
    if index >= count:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
        raise RuntimeError(
            f"--gpu on {socket.gethostname()}: this rank's GPU is device {index} of CUDA_VISIBLE_DEVICES={visible}, "
            f"but CUDA opens only {count} of them here. A container or the GPU driver hides the others: check "
            "nvidia-smi on that host, and that each executor's GPU discovery script lists only GPUs it can use.")
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def init_group(plan: RunPlan, rank: int, store: Any, device: str) -> None:
    """Threads per rank, the device, and the default group: gloo on the CPU; with --gpu NCCL for CUDA tensors and
    gloo for CPU ones (``GPU_BACKEND``; ``get_backend()`` says "nccl", as under torchrun's
    ``init_process_group("nccl")``), the rank's GPU current, and a gloo group of the runtime's own beside it for the
    CPU tensors it sends (``cpu_group``)."""
    import torch
    import torch.distributed as dist

    threads = plan.threads or max(1, (os.cpu_count() or 1) // max(1, _host_ranks))
    torch.set_num_threads(threads)
    timeout = datetime.timedelta(seconds=plan.pg_timeout_s)
    if plan.gpu:
        dist.init_process_group(GPU_BACKEND, store=store, rank=rank, world_size=plan.world_size, timeout=timeout,
                                device_id=_use_gpu(device))
        _answer_nccl()
        global _cpu_group
        _cpu_group = dist.new_group(backend="gloo", timeout=timeout)
    else:
        dist.init_process_group("gloo", store=store, rank=rank, world_size=plan.world_size, timeout=timeout)
    _keep_default_group()


_cpu_group: Any = None
_host_ranks = 1


def cpu_group() -> Any:
    """The group the runtime's own CPU tensors go through (barriers, checks): a gloo group beside an NCCL default
    group under --gpu, else None (the default group, gloo)."""
    return _cpu_group


# -- which network interface the collectives use -----------------------------------------------------------------------
# Which network interface a rank's collectives use: the one it reached the kernel through.
#
# Gloo (and NCCL's bootstrap) pick an interface by resolving the host's own name unless told; on a stock Debian or
# Ubuntu host that name resolves to 127.0.1.1, so each rank advertises a loopback address to its peers on other hosts
# and the group never forms. The address a rank reached the kernel from is one its peers can reach too (they all reach
# the kernel's one address), so its interface is the one to use.
_SIOCGIFADDR = 0x8915  # Linux: an interface's (primary) IPv4 address


def interface_of(ip: str) -> str | None:
    """The name of the interface that holds IPv4 address ``ip`` on this host, or None (IPv6, not Linux, not found)."""
    if ":" in ip:
        return None
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in names:
            try:
                raw = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
            except OSError:
                continue
            if socket.inet_ntoa(raw[20:24]) == ip:
                return name
    return None


def choose_interfaces(bind_ip: str) -> str | None:
    """Point gloo and NCCL at the interface of ``bind_ip``, unless the user chose one; returns the name set."""
    if not bind_ip.startswith("127."):  # loopback inherited by a rank that must reach other hosts: never a choice
        for key in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            if os.environ.get(key) == "lo":
                del os.environ[key]
    if os.environ.get("GLOO_SOCKET_IFNAME") and os.environ.get("NCCL_SOCKET_IFNAME"):
        return None
    name = interface_of(bind_ip)
    if name is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", name)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", name)
    return name
