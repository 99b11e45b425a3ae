"""The contract's rendezvous: each rank's hello (who and where it is, its GPU) and the kernel's answer (where the
store is, the rank's place on its node, the GPUs it sees), planned by ``rendezvous.py``.

Part of the one vocabulary: ``contract.py`` imports both and puts them in its unions (``HELLO`` and ``RENDEZVOUS``
are its constants), so the channel's checks and the kernel's dispatch cover them like any other message. They live
in a module of their own only to keep each module short.
"""
from __future__ import annotations

from typing import Literal, TypedDict

__all__ = ["HelloMsg", "RendezvousMsg"]


class _Hello(TypedDict):
    t: Literal["hello"]
    host: str
    ip: str               # the address the rank's own listeners use
    pid: int


class HelloMsg(_Hello, total=False):
    store_port: int       # rank 0 only
    gpu: str              # --gpu: the rank's own GPU (a CUDA_VISIBLE_DEVICES entry)
    scope: str            # --gpu: which GPUs it can open (gpus.device_scope)
    node: int             # TorchDistributor's layout: the node (Spark task) it belongs to (rendezvous.py)


class RendezvousMsg(TypedDict):
    t: Literal["rendezvous"]
    master_addr: str
    master_port: int
    local_rank: int
    local_world_size: int
    group_rank: int
    num_hosts: int
    gpus: list[str]       # --gpu: its CUDA_VISIBLE_DEVICES (LOCAL_RANK indexes its own); else empty
    host_ranks: int       # the run's ranks on its host (more than its node's under TorchDistributor's layout)
