"""Lightning's and Hugging Face's Trainers report to the view: each rank's step, total and logged metrics.

Their own progress bars cannot be relied on for that: Lightning draws a rich bar when ``rich`` is installed (no
tqdm to forward) and only on rank 0; Hugging Face's Trainer logs its loss as printed dicts, not on its bar. So when
the user's code imports a Trainer, every Trainer made in the rank gets one more callback, through the framework's
public callback API, that calls ``report()``. It observes and never changes training; its failures are swallowed.
"""
from __future__ import annotations

import functools
import math
from types import ModuleType
from typing import Any, Callable

from .import_hooks import patch_on_import

__all__ = ["install"]

_LIGHTNING = ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer")
_HF = "transformers.trainer"


def _numbers(values: Any) -> dict[str, Any]:
    """The scalar metrics of a logged dict (tensors of one element included), by name."""
    out: dict[str, Any] = {}
    for key, value in dict(values or {}).items():
        numel = getattr(value, "numel", None)
        if numel is not None and numel() == 1:
            out[str(key)] = value
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[str(key)] = value
    return out


def _after_init(cls: type, attach: Callable[[Any], None]) -> None:
    """Call ``attach(trainer)`` after every ``cls(...)``; once per class, however often the rank patches it."""
    init = cls.__init__  # type: ignore[misc]
    if getattr(init, "_jupyter_torchdist", False):
        return

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        try:
            attach(self)
        except Exception:
            pass

    __init__._jupyter_torchdist = True  # type: ignore[attr-defined]
    cls.__init__ = __init__  # type: ignore[misc]


def _lightning(report: Callable[..., None]) -> Callable[[ModuleType], None]:
    def patch(module: ModuleType) -> None:
        base = module.__name__.split(".")[0]
        callback_base = __import__(f"{base}.pytorch.callbacks" if base == "lightning" else f"{base}.callbacks",
                                   fromlist=["Callback"]).Callback

        class ReportToNotebook(callback_base):  # type: ignore[misc, valid-type]
            def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, idx: int) -> None:
                total = trainer.estimated_stepping_batches
                loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
                extra = _numbers({"loss": loss})
                report(step=int(trainer.global_step), total=int(total) if math.isfinite(total) else None,
                       **_numbers(trainer.callback_metrics), **extra)

        _after_init(module.Trainer, lambda trainer: trainer.callbacks.append(ReportToNotebook()))
    return patch


def _hugging_face(report: Callable[..., None]) -> Callable[[ModuleType], None]:
    def patch(module: ModuleType) -> None:
        from transformers import TrainerCallback

        class ReportToNotebook(TrainerCallback):
            def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                report(step=int(state.global_step), total=int(state.max_steps) or None)

            def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
                report(step=int(state.global_step), total=int(state.max_steps) or None, **_numbers(logs))

        _after_init(module.Trainer, lambda trainer: trainer.add_callback(ReportToNotebook()))
    return patch


def install(report: Callable[..., None]) -> None:
    """Bridge the Trainers this rank's code will import (or has imported) to ``report``."""
    lightning = _lightning(report)
    patch_on_import({**{name: lightning for name in _LIGHTNING}, _HF: _hugging_face(report)})
