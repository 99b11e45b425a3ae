"""tqdm bars in a rank become that rank's progress in the view, instead of garbling output.

Installed only inside a rank's process, for the length of one run.
"""
from __future__ import annotations

import importlib
import io
from typing import Any, Callable

__all__ = ["install"]

_MODULES = ("tqdm", "tqdm.std", "tqdm.auto", "tqdm.autonotebook", "tqdm.notebook", "tqdm.rich")


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


def install(report: Callable[..., None]) -> bool:
    """Replace tqdm's bar classes with ones that report instead of drawing. False if no tqdm."""
    try:
        std = importlib.import_module("tqdm.std")
    except ImportError:
        return False

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

    def trange(*args: Any, **kwargs: Any) -> Any:
        return ForwardedTqdm(range(*args), **kwargs)

    for name in _MODULES:
        try:
            mod = importlib.import_module(name)
        except Exception:
            continue
        for attr in ("tqdm", "tqdm_notebook", "tqdm_rich"):
            if hasattr(mod, attr):
                setattr(mod, attr, ForwardedTqdm)
        for attr in ("trange", "tnrange", "trrange"):
            if hasattr(mod, attr):
                setattr(mod, attr, trange)
    return True
