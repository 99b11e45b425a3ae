"""Which network interface a rank's collectives use: the one it reached the kernel through.

Gloo (and NCCL's bootstrap) pick an interface by resolving the host's own name unless told; on a stock Debian or
Ubuntu host that name resolves to 127.0.1.1, so each rank advertises a loopback address to its peers on other hosts
and the group never forms. The address a rank reached the kernel from is one its peers can reach too (they all reach
the kernel's one address), so its interface is the one to use.
"""
from __future__ import annotations

import fcntl
import os
import socket
import struct

__all__ = ["interface_of", "choose_interfaces"]

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
