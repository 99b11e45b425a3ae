"""Which GPUs each rank gets and sees. Pure rules, no pyspark, so every launcher (and its tests) can share them.

The placement rule, the same on every backend: each rank has a GPU of its own; the ranks of a run that share a host
(and can open the same devices) all see the GPUs of all of them, in the order of their ranks, so that ``LOCAL_RANK``
is the index of the rank's own GPU in ``CUDA_VISIBLE_DEVICES`` and ``cuda:LOCAL_RANK`` is that GPU. That is what
torchrun gives on one host, what the PyTorch tutorials, Horovod, Lightning and DeepSpeed code expect, and what NCCL's
peer-to-peer paths between a host's GPUs need. Where a rank can open only its own GPU (containers that isolate
devices), it sees only that one, as device 0 with ``LOCAL_RANK`` 0, as pyspark's TorchDistributor gives there.

Who hands a rank its GPU: on a cluster Spark's scheduler (the task's ``gpu`` resource addresses); on the kernel's own
machine (a ``local[N]`` master, or ``--local``) nobody schedules GPUs, so ranks take the kernel's visible GPUs in
rank order, as TorchDistributor does on a local master. The ranks of a host learn each other's at the rendezvous
(``rendezvous.py``).
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DEVICE_ENV", "visible_gpus", "parse_visible_devices", "task_gpus", "placements", "task_ranks",
           "require_local_gpus", "device_scope", "cuda_unfit", "gpus_per_task", "NoGpuError", "is_mig",
           "visibility_source", "device_env", "is_rocm", "fork_safe_gpu_count", "host_report"]

DEVICE_ENV = "JUPYTER_TORCHDIST_DEVICE"  # the rank's own device, set by the runtime for jupyter_torchdist.device()
ORDER_ENV = "CUDA_DEVICE_ORDER"


class NoGpuError(RuntimeError):
    """A rank was asked to use a GPU but none is there for it; the message says what to configure."""


def parse_visible_devices(value: str) -> list[str]:
    """The devices a CUDA_VISIBLE_DEVICES value exposes, as CUDA reads it.

    CUDA stops at the first invalid entry, so ``"-1"`` hides every GPU and ``"0,-1,1"`` shows only 0;
    ``""`` shows none. Entries are kept as written (indexes or ``GPU-...`` UUIDs): a rank's
    CUDA_VISIBLE_DEVICES lists them again, which means the same devices in the child.
    """
    out: list[str] = []
    for entry in value.split(","):
        entry = entry.strip()
        if not entry or (entry.lstrip("-").isdigit() and int(entry) < 0):
            break
        out.append(entry)
    return out


def is_rocm() -> bool:
    """Whether this Python's torch is a ROCm (HIP) build: its GPUs are AMD's, seen through HIP's variables."""
    try:
        import torch
    except ImportError:
        return False
    return getattr(torch.version, "hip", None) is not None


def is_mig(gpu: str) -> bool:
    """A MIG instance (``MIG-<uuid>``, or the older ``MIG-GPU-<uuid>/<gi>/<ci>``): CUDA shows a process at most one
    MIG instance, the first one its CUDA_VISIBLE_DEVICES lists, so a rank on one sees it alone, as device 0."""
    return gpu.startswith("MIG-")


_HIP_ORDER = ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def visibility_source(env: Mapping[str, str], hip: bool) -> str | None:
    """The variable that says which GPUs this process sees (None: every GPU of the host).

    CUDA reads CUDA_VISIBLE_DEVICES. A ROCm build's HIP reads HIP_VISIBLE_DEVICES, else CUDA_VISIBLE_DEVICES, both
    as indexes into what ROCR_VISIBLE_DEVICES (read first, by the ROCm runtime below HIP) leaves; with only
    ROCR_VISIBLE_DEVICES set (Slurm sets it for AMD GPUs) its list is the one to index.
    """
    names = _HIP_ORDER if hip else ("CUDA_VISIBLE_DEVICES",)
    return next((name for name in names if env.get(name) is not None), None)


def device_env(gpus: Sequence[str], env: Mapping[str, str], hip: bool) -> dict[str, str]:
    """The variables a GPU rank's process gets so that it sees exactly ``gpus``, in that order, before anything in it
    touches the GPU (CUDA and HIP read them once). ``gpus`` are written as read (``visibility_source``): into the
    variable they were read from, and on ROCm builds into HIP_VISIBLE_DEVICES beside CUDA_VISIBLE_DEVICES (HIP reads
    the first, other code the second); ROCR_VISIBLE_DEVICES is written only where it is the list they index.
    CUDA_DEVICE_ORDER=PCI_BUS_ID unless ``env`` sets it: CUDA's own order puts the fastest GPU first, nvidia-smi and
    the GPU discovery scripts Spark runs number them by PCI bus, and an index must mean the same GPU to both."""
    listed = ",".join(gpus)
    out = {"ROCR_VISIBLE_DEVICES": listed} if hip and visibility_source(env, hip) == "ROCR_VISIBLE_DEVICES" else (
        {"CUDA_VISIBLE_DEVICES": listed, "HIP_VISIBLE_DEVICES": listed} if hip else {"CUDA_VISIBLE_DEVICES": listed})
    if env.get(ORDER_ENV) is None:
        out[ORDER_ENV] = "PCI_BUS_ID"
    return out


def visible_gpus(env: Mapping[str, str] | None = None, hip: bool | None = None) -> list[str]:
    """The GPUs this process may hand out: what CUDA_VISIBLE_DEVICES lists (HIP's variables on a ROCm build:
    ``visibility_source``) if set, else every GPU torch sees."""
    env = os.environ if env is None else env
    source = visibility_source(env, is_rocm() if hip is None else hip)
    if source is not None:
        return parse_visible_devices(env[source])
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:
        return []


def task_gpus(resources: Mapping[str, Any] | None, env: Mapping[str, str] | None = None,
              hip: bool | None = None) -> list[str]:
    """The GPUs Spark scheduled to this task, as CUDA_VISIBLE_DEVICES entries.

    pyspark's rule (``_get_gpus_owned``): where the executor itself runs with CUDA_VISIBLE_DEVICES (a container, a
    resource manager), a whole-number address is an index into that list; otherwise it names the device. On a ROCm
    build the list is HIP's (``visibility_source``).
    """
    env = os.environ if env is None else env
    res = resources.get("gpu") if resources else None
    addresses = [str(a) for a in (getattr(res, "addresses", None) or [])]
    source = visibility_source(env, is_rocm() if hip is None else hip)
    if source is None:
        return addresses
    inherited = env[source]
    listed = parse_visible_devices(inherited)
    out = []
    for address in addresses:
        if not address.isdigit():
            out.append(address)  # a UUID names the device itself
        elif int(address) < len(listed):
            out.append(listed[int(address)])
        else:
            raise NoGpuError(f"Spark gave this task GPU {address}, but its executor runs with "
                             f"{source}={inherited} ({len(listed)} GPUs): the executor's GPU discovery "
                             "script must list addresses as indexes into that list (0 for its first), as pyspark "
                             "reads them")
    return out


def placements(first: int, count: int, scheduled: Sequence[str], local_gpus: Sequence[str] | None,
               world_size: int) -> list[tuple[int, str]]:
    """The ranks one task runs, with each one's GPU: ``count`` ranks from ``first``, one per GPU Spark scheduled to
    the task; on the kernel's host (no scheduled GPUs), rank ``r`` takes the kernel's ``local_gpus[r]``.

    A missing GPU is an error here, never a shared one: two NCCL ranks on one GPU fail late and obscurely
    (launchers check the counts before starting; this is the last line of defence).
    """
    ranks = list(range(first, min(first + count, world_size)))
    if scheduled:
        if len(scheduled) < len(ranks):
            raise NoGpuError(f"this task runs {len(ranks)} ranks but Spark gave it {len(scheduled)} GPUs "
                             f"({', '.join(scheduled)})")
        return list(zip(ranks, scheduled))
    if local_gpus:
        missing = [r for r in ranks if r >= len(local_gpus)]
        if missing:
            raise NoGpuError(f"rank {missing[0]} has no GPU of its own: only {len(local_gpus)} visible "
                             f"({', '.join(local_gpus)}); use at most {len(local_gpus)} ranks with --gpu")
        return [(r, str(local_gpus[r])) for r in ranks]
    raise NoGpuError("this task has no GPU: set spark.task.resource.gpu.amount=1 and "
                     "spark.executor.resource.gpu.amount (with spark.executor.resource.gpu.discoveryScript) "
                     "on the cluster")


def task_ranks(ctx: Any, per_task: int, plan: Any, local_gpus: Sequence[str] | None) -> list[tuple[int, str | None]]:
    """The ranks a Spark task (``ctx``: its TaskContext) runs, each with its GPU under --gpu: ``per_task`` of them
    from partition id x ``per_task``, one per GPU Spark gave the task (one rank per task without --gpu)."""
    first = ctx.partitionId() * per_task
    if not plan.gpu:
        return [(first, None)]
    return list(placements(first, per_task, task_gpus(ctx.resources()), local_gpus, plan.world_size))


def gpus_per_task(value: str | None) -> int:
    """How many ranks each Spark task runs under ``--gpu``: one per GPU of ``spark.task.resource.gpu.amount``.

    Below one GPU a task shares its GPU with others, which NCCL cannot do (two ranks on one device); a fraction
    above one cannot be split into ranks. Both are refused with what to set."""
    from .errors import LaunchError

    key = "spark.task.resource.gpu.amount"
    try:
        amount = float(value) if value is not None and str(value).strip() else 0.0
    except ValueError:
        raise LaunchError(f"--gpu: {key}={value!r} is not a number of GPUs; set it to 1 (a rank per task) or a "
                          "whole number (a rank per GPU of each task).") from None
    if amount <= 0:
        raise LaunchError(f"--gpu on a cluster needs GPU scheduling: set {key}=1, "
                          "spark.executor.resource.gpu.amount and spark.executor.resource.gpu.discoveryScript "
                          "when the SparkSession is created.")
    if amount < 1:
        raise LaunchError(f"--gpu: {key}={value} shares each GPU between tasks, but NCCL runs one rank per GPU "
                          f"(two ranks on one device fail). Set {key}=1 on the session, or drop --gpu to train "
                          "on the CPU.")
    if amount != int(amount):
        raise LaunchError(f"--gpu: {key}={value} is not a whole number of GPUs; set it to 1 (a rank per task) or "
                          "a whole number (a rank per GPU of each task).")
    return int(amount)


def require_local_gpus(n: int, chosen: Sequence[str] = ()) -> list[str]:
    """The kernel's visible GPUs (or the ``chosen`` ones: TorchDistributor's draw from the driver's), refusing before
    launch when there are fewer than ``n`` ranks or this torch cannot run NCCL on them."""
    import socket

    from .errors import LaunchError

    why = cuda_unfit()
    if why is not None:
        raise LaunchError(why)
    if chosen:
        if len(chosen) < n:
            raise LaunchError(f"--gpu with -n {n} needs {n} GPUs, but only {len(chosen)} were given to the run "
                              f"({', '.join(chosen)}).")
        return list(chosen)
    gpus = visible_gpus()
    if len(gpus) < n:
        var = visibility_source(os.environ, is_rocm()) or "CUDA_VISIBLE_DEVICES"
        raise LaunchError(
            f"--gpu with -n {n} needs {n} GPUs, but this machine ({socket.gethostname()}) shows {len(gpus)} "
            f"({var}={os.environ.get(var, '<unset>')}). "
            "Drop --gpu to train on the CPU with gloo, or use fewer ranks.")
    return gpus


def fork_safe_gpu_count(dev: str = "/dev") -> int:
    """How many GPUs this host has, asked without initialising CUDA: NVML (AMD SMI on ROCm) through torch, as
    ``torch.cuda.device_count`` asks first, else the GPU device files. A Spark Python worker that asked CUDA itself
    could no longer fork a rank that uses the GPU."""
    import torch

    try:
        count = int(torch.cuda._device_count_amdsmi() if is_rocm() else torch.cuda._device_count_nvml())
    except Exception:
        count = -1
    if count >= 0:
        return count
    try:
        return sum(1 for name in os.listdir(dev) if _NVIDIA_DEVICE.fullmatch(name))
    except OSError:
        return 0


def host_report() -> dict[str, Any]:
    """What a run's preflight task says of its host (``launchers/gpu_preflight.py``): its name, its Python, why its
    torch cannot run a GPU rank (None when it can) and the GPUs a rank there may take. CUDA is not touched."""
    import socket
    import sys

    why = cuda_unfit()
    gpus: list[str] = []
    if why is None:
        source = visibility_source(os.environ, is_rocm())
        gpus = parse_visible_devices(os.environ[source]) if source else [str(i) for i in range(fork_safe_gpu_count())]
    return {"host": socket.gethostname(), "python": sys.executable, "unfit": why, "gpus": gpus}


def cuda_unfit() -> str | None:
    """Why this Python's torch cannot run a ``--gpu`` rank (a CPU-only build, no NCCL), naming this host and the
    fix; None when it can. Reads the build only: CUDA itself is not touched (a process that forks ranks must not)."""
    import socket
    import sys

    import torch
    import torch.distributed as dist

    where = f"--gpu on {socket.gethostname()} ({sys.executable})"
    if getattr(torch.version, "cuda", None) is None and getattr(torch.version, "hip", None) is None:
        return (f"{where}: torch {torch.__version__} is a CPU-only build, so it cannot use a GPU. Install a CUDA "
                "build of torch for that Python (https://pytorch.org/get-started/locally/), or drop --gpu to train "
                "on the CPU with gloo.")
    if not dist.is_available() or not dist.is_nccl_available():
        return (f"{where}: torch {torch.__version__} was built without NCCL, which --gpu runs the process group "
                "on. Install a torch build with NCCL (the pip and conda CUDA builds have it), or drop --gpu.")
    return None


_NVIDIA_DEVICE = re.compile(r"nvidia(\d+)")


def device_scope(env: Mapping[str, str] | None = None, dev: str = "/dev") -> str:
    """Which GPUs this process can open, as a key: ranks of one host with the same key can see each other's GPUs.

    Containers that isolate GPUs (Docker's ``--gpus``, a Kubernetes pod, YARN's GPU isolation through the devices
    cgroup) leave out the other GPUs' device files, or refuse to open them, and say what they gave in
    NVIDIA_VISIBLE_DEVICES or CUDA_VISIBLE_DEVICES. Two ranks that differ in any of these are placed apart.
    Opening a device file reads nothing from it; CUDA is not touched.
    """
    env = os.environ if env is None else env
    openable = []
    try:
        names = sorted(os.listdir(dev), key=lambda name: (len(name), name))
    except OSError:
        names = []
    for name in names:
        if _NVIDIA_DEVICE.fullmatch(name):
            try:
                os.close(os.open(os.path.join(dev, name), os.O_RDWR | os.O_CLOEXEC))
            except OSError:
                continue
            openable.append(name[len("nvidia"):])
    return "|".join([",".join(openable), env.get("CUDA_VISIBLE_DEVICES", "*"), env.get("NVIDIA_VISIBLE_DEVICES", "*")])
