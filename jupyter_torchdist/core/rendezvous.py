"""Where the ranks meet: computed by the kernel from every rank's hello, no Spark allGather.

Rank 0 opened the TCPStore; the kernel tells every rank its address, and each rank's place among the ranks on its
host (LOCAL_RANK) and its host's place among hosts (GROUP_RANK). Under ``--gpu`` it also tells each rank the GPUs it
sees: those of every rank of its host that can open the same devices (``gpus.device_scope``), in local rank order,
so that LOCAL_RANK is the index of the rank's own GPU (the placement rule of ``gpus.py``).

Two cases make nodes smaller than a host. pyspark's ``TorchDistributor`` runs one torchrun per Spark task, so each
task's ranks are a node of their own (each rank's hello names its ``node``, its task, under that layout): LOCAL_RANK
counts within the task, GROUP_RANK is the task's, and a rank sees its task's GPUs only; our TorchDistributor classes
ask for that layout, code written for pyspark's relies on it. And a rank on a MIG instance is a node alone, whatever the
layout: CUDA shows a process one MIG instance, so the rank sees its own alone, as device 0 with LOCAL_RANK 0.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from . import contract as C
from .gpus import is_mig

__all__ = ["plan_rendezvous"]


def _host_groups(hellos: Mapping[int, Mapping[str, Any]], world_size: int) -> list[list[int]]:
    """The ranks of each node, nodes in order of their first rank, ranks in rank order. A node is a host; ranks that
    share a host name but cannot open the same GPUs (isolating containers) are nodes of their own here, as is a rank
    on a MIG instance; ranks that name a node (a Spark task, in TorchDistributor's layout) share it only with its."""
    hosts: dict[tuple[Any, ...], list[int]] = {}
    for rank in range(world_size):
        hello = hellos[rank]
        gpu = str(hello.get("gpu") or "")
        key = (hello.get("host"), hello.get("ip"), hello.get("scope", ""), hello.get("node", -1),
               gpu if is_mig(gpu) else "")
        hosts.setdefault(key, []).append(rank)
    return list(hosts.values())


def _gpus(hellos: Mapping[int, Mapping[str, Any]], ranks: list[int]) -> list[str]:
    """The GPUs the ranks of one host see, in their order; every rank must have one of its own."""
    gpus = [hellos[r].get("gpu") for r in ranks]
    if not any(gpus):
        return []
    host = hellos[ranks[0]].get("host")
    owners: dict[str, int] = {}
    for rank, gpu in zip(ranks, gpus):
        if not gpu:
            raise ValueError(f"rank {rank} on {host} has no GPU while its host's other ranks have one")
        if gpu in owners:
            raise ValueError(f"ranks {owners[gpu]} and {rank} on {host} were both given GPU {gpu}: NCCL needs a GPU "
                             "per rank (a spark.task.resource.gpu.amount below 1, or executors whose GPU discovery "
                             "scripts list the same devices, share them)")
        owners[gpu] = rank
    return [str(g) for g in gpus]


def plan_rendezvous(hellos: Mapping[int, Mapping[str, Any]], world_size: int) -> dict[int, C.RendezvousMsg]:
    """One rendezvous message per rank, once every rank has said hello (``hellos``: each rank's hello message: its
    host and ip, rank 0's store_port, under --gpu its GPU and device scope, in TorchDistributor's layout its node)."""
    if sorted(hellos) != list(range(world_size)):
        raise ValueError(f"need a hello from every rank, have {sorted(hellos)}")
    master = hellos[0]
    if master.get("store_port") is None:
        raise ValueError("rank 0's hello lacks its store port")
    groups = _host_groups(hellos, world_size)
    per_host = Counter((hello.get("host"), hello.get("ip")) for hello in hellos.values())
    out: dict[int, C.RendezvousMsg] = {}
    for group_rank, ranks in enumerate(groups):
        gpus = _gpus(hellos, ranks)
        for local_rank, rank in enumerate(ranks):
            out[rank] = {
                "t": C.RENDEZVOUS, "master_addr": master["ip"], "master_port": int(master["store_port"]),
                "local_rank": local_rank, "local_world_size": len(ranks), "group_rank": group_rank,
                "num_hosts": len(groups), "gpus": gpus,
                "host_ranks": per_host[hellos[rank].get("host"), hellos[rank].get("ip")],
            }
    return out
