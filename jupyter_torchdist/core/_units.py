"""Sizes in words people read, shared by the kernel's and the ranks' messages."""
from __future__ import annotations

__all__ = ["human_bytes"]


def human_bytes(n: float) -> str:
    """``512 B``, ``1.5 KB``, ``12.0 MB``, ``2.1 GB``."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"
