"""Where the ranks meet: each rank's hello (who and where it is, its GPU) and the kernel's answer (where the store is,
the rank's place on its node, the GPUs it sees), planned by ``core/rendezvous.py`` once every rank has said hello.
"""
from __future__ import annotations

from typing import Final, Literal, TypedDict

__all__ = ["HELLO", "RENDEZVOUS", "HelloMsg", "RendezvousMsg"]

HELLO: Final = "hello"            # rank -> kernel: who I am; rank 0 adds where its TCPStore listens
RENDEZVOUS: Final = "rendezvous"  # kernel -> rank: where the store is, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GPUs


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
