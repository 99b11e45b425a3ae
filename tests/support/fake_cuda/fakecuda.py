"""A stand-in for CUDA on a machine without GPUs, keeping the rules that decide GPU placement.

The rules kept, as CUDA has them:

1. A process sees exactly the devices ``CUDA_VISIBLE_DEVICES`` lists (indexes or ``GPU-`` UUIDs, up to the first
   entry that names no device) at the moment it first touches CUDA; later changes to the variable do nothing.
2. ``torch.cuda.set_device(i)`` past the devices the process sees fails with "invalid device ordinal".
3. A process forked after its parent touched CUDA cannot use CUDA ("Cannot re-initialize CUDA in forked
   subprocess").

``FAKE_CUDA_GPUS=N`` gives the host N devices (physical indexes 0..N-1, UUIDs ``GPU-fake-<i>``). torch keeps
computing on the CPU: no CUDA tensor can be made, so cells under test ask where they are rather than compute there.
"NCCL" process groups are gloo groups that answer to the name "nccl". ``physical()`` says which of the host's
devices this process's current device is: what a test compares across ranks.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from typing import Any

__all__ = ["install_on_import", "physical", "visible", "uuid"]


class _State:
    seen: list[int] | None = None   # physical indexes this process sees, once it touched CUDA
    current = 0
    touched_in: int | None = None   # the pid that touched CUDA first (a forked child inherits it)
    faked_groups: set[int] = set()


_state = _State()


def _count() -> int:
    return int(os.environ.get("FAKE_CUDA_GPUS", "0") or 0)


def uuid(index: int) -> str:
    return f"GPU-fake-{index}"


def _parse(value: str | None) -> list[int]:
    if value is None:
        return list(range(_count()))
    out: list[int] = []
    for entry in value.split(","):
        entry = entry.strip()
        if entry.isdigit() and int(entry) < _count():
            index = int(entry)
        elif entry in [uuid(i) for i in range(_count())]:
            index = int(entry.rsplit("-", 1)[1])
        else:
            break  # CUDA stops at the first entry that names no device
        if index in out:
            raise RuntimeError(f"CUDA error: CUDA_VISIBLE_DEVICES={value} names device {index} twice")
        out.append(index)
    return out


def _touch() -> list[int]:
    if _state.touched_in is not None and _state.touched_in != os.getpid():
        raise RuntimeError("Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you "
                           "must use the 'spawn' start method")
    if _state.seen is None:
        _state.seen, _state.touched_in = _parse(os.environ.get("CUDA_VISIBLE_DEVICES")), os.getpid()
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
    }
    for name, fn in patches.items():
        setattr(cuda, name, fn)

    def utilization(device: Any = None) -> int:
        raise ModuleNotFoundError("pynvml does not seem to be installed or it can't be imported.")

    cuda.utilization = utilization
    torch.version.cuda = "12.8"
    if hasattr(cuda, "nccl"):
        cuda.nccl.version = lambda: (2, 21, 5)


def _patch_dist(torch: Any) -> None:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    real_init, real_backend, real_config = c10d.init_process_group, c10d.get_backend, c10d.get_backend_config

    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        name = str(backend or "")
        if "nccl" in name:
            if not torch.cuda.is_available():
                raise RuntimeError("ProcessGroupNCCL is only supported with GPUs, no GPUs found!")
            device = kwargs.pop("device_id", None)
            if device is not None:
                _index_checked(device)
            result = real_init("gloo", *args, **kwargs)
            _state.faked_groups.add(id(c10d.GroupMember.WORLD))
            return result
        return real_init(backend, *args, **kwargs)

    def _index_checked(device: Any) -> None:
        if not 0 <= _index(device) < len(_touch()):
            raise RuntimeError("CUDA error: invalid device ordinal")

    def _faked(group: Any) -> bool:
        group = c10d.GroupMember.WORLD if group is None else group
        return id(group) in _state.faked_groups

    def get_backend(group: Any = None) -> Any:
        return "nccl" if _faked(group) else real_backend(group)

    def get_backend_config(group: Any = None) -> Any:
        return "cuda:nccl" if _faked(group) else real_config(group)

    for module in (dist, c10d):
        module.init_process_group = init_process_group
        module.get_backend = get_backend
        module.get_backend_config = get_backend_config
        module.is_nccl_available = lambda: True


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
