"""Where the ranks meet: computed by the kernel from every rank's hello, no Spark allGather.

Rank 0 opened the TCPStore; the kernel tells every rank its address, and each rank's place
among the ranks on its host (LOCAL_RANK) and its host's place among hosts (GROUP_RANK).
"""
from __future__ import annotations

from typing import Any

from . import contract as C

__all__ = ["plan_rendezvous"]


def plan_rendezvous(hellos: dict[int, dict[str, Any]], world_size: int) -> dict[int, C.RendezvousMsg]:
    """One rendezvous message per rank, once every rank has said hello (``hellos``: each rank's host, ip and,
    for rank 0, store_port)."""
    if sorted(hellos) != list(range(world_size)):
        raise ValueError(f"need a hello from every rank, have {sorted(hellos)}")
    master = hellos[0]
    if "store_port" not in master:
        raise ValueError("rank 0's hello lacks its store port")
    hosts: dict[str, list[int]] = {}
    for rank in range(world_size):
        key = f"{hellos[rank].get('host')}|{hellos[rank].get('ip')}"
        hosts.setdefault(key, []).append(rank)
    out: dict[int, C.RendezvousMsg] = {}
    for group_rank, ranks in enumerate(hosts.values()):
        for local_rank, rank in enumerate(ranks):
            out[rank] = {
                "t": C.RENDEZVOUS, "master_addr": master["ip"], "master_port": int(master["store_port"]),
                "local_rank": local_rank, "local_world_size": len(ranks), "group_rank": group_rank,
                "num_hosts": len(hosts),
            }
    return out
