"""Launcher backends, one per file, behind the small interface in ``base``."""
from .base import Launcher, LaunchInfo

__all__ = ["Launcher", "LaunchInfo", "get_launcher"]


def get_launcher(local: bool) -> Launcher:
    """The launcher for a run: Spark by default, plain local processes with ``--local``."""
    if local:
        from .local import LocalLauncher

        return LocalLauncher()
    from .spark import SparkLauncher

    return SparkLauncher()
