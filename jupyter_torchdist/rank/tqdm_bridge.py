"""tqdm bars in a rank become that rank's progress in the view, instead of garbling output.

Installed only inside a rank's process, for the length of one run.
"""
from __future__ import annotations

import importlib
import io
from types import ModuleType
from typing import Any, Callable

from .import_hooks import patch_on_import

__all__ = ["install"]

_EAGER = ("tqdm", "tqdm.std", "tqdm.auto", "tqdm.autonotebook")
_LAZY = ("tqdm.notebook", "tqdm.rich")  # costly imports (IPython, ipywidgets, rich): patched if ever imported


def _postfix_metrics(postfix: Any) -> dict[str, Any]:
    metrics: dict[str, Any] = {}
    if not isinstance(postfix, str):
        return metrics
    for part in postfix.split(","):
        key, sep, value = part.partition("=")
        if not sep:
            continue
        try:
            metrics[key.strip()] = float(value)
        except ValueError:
            metrics[key.strip()] = value.strip()
    return metrics


def _forwarding_class(std: ModuleType, report: Callable[..., None]) -> type:
    """A tqdm bar class that reports its step, total and postfix instead of drawing."""

    class ForwardedTqdm(std.tqdm):  # type: ignore[misc, name-defined]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["file"] = io.StringIO()
            kwargs.pop("display", None)  # tqdm.notebook's own keyword
            kwargs.setdefault("mininterval", 0.1)
            super().__init__(*args, **kwargs)

        def display(self, msg: Any = None, pos: Any = None) -> bool:
            try:
                metrics = _postfix_metrics(self.postfix)
                if self.desc:
                    metrics.setdefault("bar", self.desc.rstrip(": "))
                report(step=int(self.n), total=None if self.total is None else int(self.total), **metrics)
            except Exception:
                pass
            return True

    return ForwardedTqdm


def install(report: Callable[..., None]) -> bool:
    """Replace tqdm's bar classes with ones that report instead of drawing. False if no tqdm."""
    try:
        std = importlib.import_module("tqdm.std")
    except ImportError:
        return False
    ForwardedTqdm = _forwarding_class(std, report)

    def trange(*args: Any, **kwargs: Any) -> Any:
        return ForwardedTqdm(range(*args), **kwargs)

    def patch(mod: ModuleType) -> None:
        for attr in ("tqdm", "tqdm_notebook", "tqdm_rich"):
            if hasattr(mod, attr):
                setattr(mod, attr, ForwardedTqdm)
        for attr in ("trange", "tnrange", "trrange"):
            if hasattr(mod, attr):
                setattr(mod, attr, trange)

    for name in _EAGER:
        try:
            patch(importlib.import_module(name))
        except Exception:
            continue
    patch_on_import({name: patch for name in _LAZY})
    return True

