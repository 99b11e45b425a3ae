"""What a tracked run is called: its MLflow experiment, its run's name, its folder under ``--logdir``."""
from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["experiment_name", "notebook_path", "folder_name", "member_name", "params_label", "tracking_uri"]

FALLBACK_EXPERIMENT: Final = "jupyter-torchdist"
_UNSAFE = re.compile(r"[^A-Za-z0-9._=+,-]+")


def notebook_path() -> str | None:
    """The notebook this kernel runs, when the front end says (Jupyter Server's JPY_SESSION_NAME, VS Code's name),
    else the script the command line runs."""
    path = os.environ.get("JPY_SESSION_NAME")
    if path:
        return path
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is not None:
        for name in ("__session__", "__vsc_ipynb_file__"):
            value = shell.user_ns.get(name)
            if isinstance(value, str) and value:
                return value
        return None
    return sys.argv[0] if sys.argv and sys.argv[0] else None


def experiment_name(given: str | None) -> str:
    """``--experiment``, else the notebook's name (no folder, no ``.ipynb``)."""
    if given:
        return given
    path = notebook_path()
    if not path:
        return FALLBACK_EXPERIMENT
    stem = os.path.splitext(os.path.basename(path))[0]
    return stem or FALLBACK_EXPERIMENT


def tracking_uri() -> str | None:
    """MLflow's tracking URI as this kernel sees it now (the notebook's ``mlflow.set_tracking_uri`` included)."""
    if "mlflow" in sys.modules:
        try:
            return str(sys.modules["mlflow"].get_tracking_uri())
        except Exception:
            pass
    return os.environ.get("MLFLOW_TRACKING_URI") or None


def folder_name(kind: str, number: int | None, at: float | None = None) -> str:
    """``2026-11-28_09-30-05-run3``: sorts by time, unique across kernels writing to one folder."""
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(at))
    return f"{stamp}-{kind}{number if number is not None else ''}"


def params_label(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={_short(v)}" for k, v in params.items())


def member_name(number: int, params: Mapping[str, Any]) -> str:
    """A sweep member's folder: ``m03-lr=0.01,batch=32`` (safe on every filesystem, at most 100 characters)."""
    label = _UNSAFE.sub("_", ",".join(f"{k}={_short(v)}" for k, v in params.items()))
    return f"m{number:02d}-{label}"[:100].rstrip("_-,")


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    text = repr(value) if not isinstance(value, str) else value
    return text[:40]
