"""A stand-in for CUDA on a machine without GPUs, keeping the rules that decide GPU placement.

The rules kept, as CUDA has them:

1. A process sees exactly the devices ``CUDA_VISIBLE_DEVICES`` lists (indexes or ``GPU-`` UUIDs, up to the first
   entry that names no device) at the moment it first touches CUDA; later changes to the variable do nothing.
2. ``torch.cuda.set_device(i)`` past the devices the process sees fails with "invalid device ordinal".
3. A process forked after its parent touched CUDA cannot use CUDA ("Cannot re-initialize CUDA in forked
   subprocess").
4. A process sees at most one MIG instance: the first ``MIG-`` entry of ``CUDA_VISIBLE_DEVICES``, nothing after it.
5. A collective on an NCCL-only group refuses a CPU tensor ("No backend type associated with device type cpu"); a
   group made with "cpu:gloo,cuda:nccl" takes both; object collectives (which NCCL runs on the GPU) work on either.
6. On a ROCm build (``FAKE_CUDA_HIP=1``: ``torch.version.hip`` set, ``torch.version.cuda`` None) a process sees
   what ``HIP_VISIBLE_DEVICES``, else ``CUDA_VISIBLE_DEVICES``, lists, as indexes into what
   ``ROCR_VISIBLE_DEVICES`` leaves.

``FAKE_CUDA_GPUS=N`` gives the host N devices (physical indexes 0..N-1, UUIDs ``GPU-fake-<i>``); ``FAKE_CUDA_MIG=M``
adds M MIG instances (``MIG-fake-<i>``, physical indexes 100+i). torch keeps computing on the CPU: what
``tensor.cuda()`` or ``tensor.to("cuda")`` returns is a CPU copy the stand-in counts as on the GPU (for rule 5;
tensors computed from it, and parameters a module moved in place, count as CPU ones, so an NCCL-only group may
refuse what real NCCL takes, never the other way round), and no other CUDA tensor can be made: cells under test ask
where they are rather than compute there. "NCCL" process groups are gloo groups that answer to the name "nccl"
(``dist.get_backend``; torch's own ``distributed_c10d.get_backend`` says gloo, which makes subgroups gloo groups
too). ``physical()`` says which of the host's devices this process's current device is: what a test compares
across ranks.
"""
from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import inspect
import os
import sys
import weakref
from typing import Any

__all__ = ["install_on_import", "physical", "visible", "uuid"]


DUAL = "cpu:gloo,cuda:nccl"
NO_CPU = "No backend type associated with device type cpu"
_COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "broadcast", "reduce", "reduce_scatter",
                "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "scatter", "send", "recv",
                "isend", "irecv", "all_reduce_coalesced", "all_gather_coalesced")
_OBJECT_COLLECTIVES = ("all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
                       "send_object_list", "recv_object_list")


class _State:
    seen: list[int] | None = None   # physical indexes this process sees, once it touched CUDA
    current = 0
    touched_in: int | None = None   # the pid that touched CUDA first (a forked child inherits it)
    kinds: dict[int, str] = {}      # id of a faked group -> "nccl" or DUAL
    on_gpu: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()  # tensors .cuda() returned
    in_objects = 0                  # inside an object collective (NCCL moves the objects to the GPU itself)


_state = _State()


def _count() -> int:
    return int(os.environ.get("FAKE_CUDA_GPUS", "0") or 0)


def _mig() -> int:
    return int(os.environ.get("FAKE_CUDA_MIG", "0") or 0)


def _hip() -> bool:
    return os.environ.get("FAKE_CUDA_HIP", "") == "1"


def uuid(index: int) -> str:
    return f"MIG-fake-{index - 100}" if index >= 100 else f"GPU-fake-{index}"


def _entry(entry: str, among: list[int]) -> int | None:
    """The physical device a visible-devices entry names (an index into ``among``, or a UUID), or None."""
    if entry.isdigit():
        return among[int(entry)] if int(entry) < len(among) else None
    names = {uuid(i): i for i in [*range(_count()), *range(100, 100 + _mig())]}
    return names.get(entry)


def _parse(value: str | None, among: list[int] | None = None) -> list[int]:
    among = list(range(_count())) if among is None else among
    if value is None:
        return among
    out: list[int] = []
    for entry in value.split(","):
        index = _entry(entry.strip(), among)
        if index is None or (index >= 100 and any(i >= 100 for i in out)):
            break  # CUDA stops at the first entry that names no device; it shows one MIG instance at most
        if index in out:
            raise RuntimeError(f"CUDA error: CUDA_VISIBLE_DEVICES={value} names device {index} twice")
        out.append(index)
    if any(i >= 100 for i in out):
        out = [next(i for i in out if i >= 100)]  # with a MIG instance listed, CUDA shows that one alone
    return out


def _seen_now() -> list[int]:
    """What this process would see if it touched CUDA now (rules 1, 4 and 6)."""
    env = os.environ
    if not _hip():
        return _parse(env.get("CUDA_VISIBLE_DEVICES"))
    among = _parse(env.get("ROCR_VISIBLE_DEVICES"))
    hip = env.get("HIP_VISIBLE_DEVICES", env.get("CUDA_VISIBLE_DEVICES"))
    return _parse(hip, among)


def _touch() -> list[int]:
    if _state.touched_in is not None and _state.touched_in != os.getpid():
        raise RuntimeError("Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you "
                           "must use the 'spawn' start method")
    if _state.seen is None:
        _state.seen, _state.touched_in = _seen_now(), os.getpid()
    return _state.seen


def _index(device: Any) -> int:
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        return int(device.split(":", 1)[1]) if ":" in device else 0
    index = getattr(device, "index", None)
    return 0 if index is None else int(index)


def visible() -> list[int]:
    """The physical devices this process sees (touches CUDA)."""
    return list(_touch())


def physical() -> int:
    """The physical index of this process's current device."""
    return _touch()[_state.current]


class _Props:
    def __init__(self, index: int) -> None:
        self.name, self.major, self.minor = f"Fake GPU {index}", 8, 0
        self.total_memory, self.multi_processor_count, self.uuid = 80 << 30, 108, uuid(index)


def _patch_cuda(torch: Any) -> None:
    cuda = torch.cuda

    def device_count() -> int:
        return len(_touch())

    def set_device(device: Any) -> None:
        index = _index(device)
        if not 0 <= index < len(_touch()):
            raise RuntimeError("CUDA error: invalid device ordinal\nCUDA kernel errors might be asynchronously "
                               "reported at some other API call, so the stacktrace below might be incorrect.")
        _state.current = index

    def current_device() -> int:
        _touch()
        return _state.current

    def checked(device: Any = None) -> int:
        index = _state.current if device is None else _index(device)
        if not 0 <= index < len(_touch()):
            raise RuntimeError("CUDA error: invalid device ordinal")
        return index

    patches = {
        "is_available": lambda: device_count() > 0,
        "device_count": device_count,
        "set_device": set_device,
        "current_device": current_device,
        "is_initialized": lambda: _state.seen is not None and _state.touched_in == os.getpid(),
        "init": lambda: None if _touch() else None,
        "_lazy_init": lambda: None if _touch() else None,
        "synchronize": lambda device=None: None if checked(device) is not None else None,
        "empty_cache": lambda: None,
        "manual_seed": lambda seed: None,
        "manual_seed_all": lambda seed: None,
        "memory_reserved": lambda device=None: 0 if checked(device) is not None else 0,
        "memory_allocated": lambda device=None: 0 if checked(device) is not None else 0,
        "mem_get_info": lambda device=None: (80 << 30, 80 << 30) if checked(device) is not None else None,
        "get_device_name": lambda device=None: f"Fake GPU {_touch()[checked(device)]}",
        "get_device_capability": lambda device=None: (8, 0) if checked(device) is not None else None,
        "get_device_properties": lambda device=None: _Props(_touch()[checked(device)]),
        "is_bf16_supported": lambda including_emulation=True: True,
        "_device_count_nvml": lambda: len(_seen_now()),  # NVML counts without touching CUDA
        "_device_count_amdsmi": lambda: len(_seen_now()),
    }
    for name, fn in patches.items():
        setattr(cuda, name, fn)

    def utilization(device: Any = None) -> int:
        raise ModuleNotFoundError("pynvml does not seem to be installed or it can't be imported.")

    cuda.utilization = utilization
    torch.version.cuda, torch.version.hip = (None, "6.2.41133") if _hip() else ("12.8", None)
    if hasattr(cuda, "nccl"):
        cuda.nccl.version = lambda: (2, 21, 5)
    _patch_tensors(torch)


def _patch_tensors(torch: Any) -> None:
    """``t.cuda()`` and ``t.to("cuda")``: a CPU copy counted as on the GPU (rule 5), after the device is checked."""
    real_to = torch.Tensor.to

    def to_gpu(t: Any, device: Any) -> Any:
        if not 0 <= _index(device) < len(_touch()):
            raise RuntimeError("CUDA error: invalid device ordinal")
        copy = t.clone()
        _state.on_gpu[id(copy)] = copy
        return copy

    def cuda(self: Any, device: Any = None, non_blocking: bool = False, **_: Any) -> Any:
        return to_gpu(self, _state.current if device is None else device)

    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        device = kwargs.get("device", args[0] if args and isinstance(args[0], (str, torch.device)) else None)
        if device is None or torch.device(device).type != "cuda":
            return real_to(self, *args, **kwargs)
        dtype = next((a for a in args if isinstance(a, torch.dtype)), kwargs.get("dtype"))
        index = torch.device(device).index
        return to_gpu(real_to(self, dtype) if dtype is not None else self, _state.current if index is None else index)

    torch.Tensor.cuda, torch.Tensor.to = cuda, to


def _tensors(values: Any) -> Any:
    import torch

    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from _tensors(v)


def _guarded(fn: Any, kind_of: Any) -> Any:
    """A collective that keeps rule 5: on an NCCL-only group, every tensor must be on the GPU."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def collective(*args: Any, **kwargs: Any) -> Any:
        if not _state.in_objects:
            bound = signature.bind_partial(*args, **kwargs).arguments
            if kind_of(bound.get("group")) == "nccl":
                if any(_state.on_gpu.get(id(t)) is not t for t in _tensors(bound.values())):
                    raise RuntimeError(NO_CPU)
        return fn(*args, **kwargs)

    return collective


def _objects(fn: Any) -> Any:
    @functools.wraps(fn)
    def collective(*args: Any, **kwargs: Any) -> Any:
        _state.in_objects += 1
        try:
            return fn(*args, **kwargs)
        finally:
            _state.in_objects -= 1

    return collective


def _kind(backend: Any) -> str | None:
    """What a backend name asks for: "nccl" (NCCL only), DUAL (gloo for CPU, NCCL for CUDA), None (no NCCL)."""
    name = str(backend or "")
    if "nccl" not in name:
        return None
    return DUAL if "cpu:" in name else "nccl"


def _patch_dist(torch: Any) -> None:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    real_init, real_new = c10d.init_process_group, c10d.new_group
    real_backend, real_config = c10d.get_backend, c10d.get_backend_config

    def kind_of(group: Any) -> str | None:
        return _state.kinds.get(id(c10d.GroupMember.WORLD if group is None else group))

    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        kind = _kind(backend)
        if kind is None:
            return real_init(backend, *args, **kwargs)
        if not torch.cuda.is_available():
            raise RuntimeError("ProcessGroupNCCL is only supported with GPUs, no GPUs found!")
        device = kwargs.pop("device_id", None)
        if device is not None and not 0 <= _index(device) < len(_touch()):
            raise RuntimeError("CUDA error: invalid device ordinal")
        result = real_init("gloo", *args, **kwargs)
        _state.kinds[id(c10d.GroupMember.WORLD)] = kind
        return result

    def new_group(ranks: Any = None, timeout: Any = None, backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        kind = _kind(backend) if backend is not None else kind_of(None)  # no backend named: the default's
        group = real_new(ranks, timeout, "gloo" if kind else backend, *args, **kwargs)
        if kind:
            _state.kinds[id(group)] = kind
        return group

    def get_backend(group: Any = None) -> Any:
        return kind_of(group) or real_backend(group)

    def get_backend_config(group: Any = None) -> Any:
        kind = kind_of(group)
        return ("cuda:nccl" if kind == "nccl" else kind) if kind else real_config(group)

    for module in (dist, c10d):
        module.init_process_group, module.new_group = init_process_group, new_group
        module.is_nccl_available = lambda: True
        for name in _COLLECTIVES:
            setattr(module, name, _guarded(getattr(c10d, name), kind_of))
        for name in _OBJECT_COLLECTIVES:
            setattr(module, name, _objects(getattr(c10d, name)))
    dist.get_backend, dist.get_backend_config = get_backend, get_backend_config


def _install(torch: Any) -> None:
    _patch_cuda(torch)
    _patch_dist(torch)


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Patches torch as soon as ``import torch`` has run its module."""

    busy = False

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch" or self.busy:
            return None
        self.busy = True  # a spec asked for without an import (importlib.util.find_spec) must not end the watch
        try:
            spec = importlib.util.find_spec("torch")
        finally:
            self.busy = False
        if spec is None or spec.loader is None:
            return spec
        loader, run = spec.loader, spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            _install(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install_on_import() -> None:
    if "torch" in sys.modules:
        _install(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _AfterTorch())
