"""How a rank's cell ends, as the message the kernel reads: the value (pickled, tensors on the CPU) or
the failure (the traceback from the cell's own frame down, in its own line numbers)."""
from __future__ import annotations

import os
import time
import traceback
from typing import Any

from ..core import contract as C
from ..core.travel import Pickler, dumps
from ..core.brief import human_bytes

__all__ = ["dumps_value", "final_message", "summary", "user_traceback"]

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _identity(x: Any) -> Any:
    return x


def dumps_value(value: Any) -> bytes:
    """cloudpickle the value with every tensor moved to the CPU (the kernel may have no GPU)."""
    import torch

    class CpuPickler(Pickler):
        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, torch.Tensor) and obj.device.type != "cpu":
                if isinstance(obj, torch.nn.Parameter):
                    return torch.nn.Parameter, (obj.detach().cpu(), obj.requires_grad)
                return _identity, (obj.detach().cpu(),)
            return super().reducer_override(obj)

    return dumps(value, CpuPickler)


def user_traceback(exc: BaseException, filename: str) -> str:
    """The traceback from the cell's own frame down: none of our frames, the cell's line numbers."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        if not tb.tb_frame.f_code.co_filename.startswith(_PKG_DIR):
            break
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))


def summary(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:500]}" if text else type(exc).__name__


def _failed(text: str) -> C.FailedMsg:
    return {"t": C.FAILED, "summary": text, "traceback": "", "at": time.time()}


def _value_message(value: Any, max_bytes: int) -> C.FinalMessage:
    try:
        data = dumps_value(value)
    except Exception as exc:
        return _failed(f"the cell's value ({type(value).__name__}) could not be pickled to bring it back: "
                       f"{summary(exc)}. Return plain data instead (numbers, lists, tensors, a state_dict: "
                       "e.g. model.module.state_dict() rather than the DDP model).")
    if len(data) > max_bytes:
        return _failed(f"the cell's value is {human_bytes(len(data))}, over the limit of {human_bytes(max_bytes)} "
                       "(--max-value-mb). Save it on the rank (torch.save(obj, path) under "
                       "`if jupyter_torchdist.is_main():`) and return the path.")
    try:
        shown = repr(value)[:2000]
    except Exception:
        shown = f"<{type(value).__name__}>"
    return {"t": C.RESULT, "value": data, "repr": shown, "at": time.time()}


def final_message(outcome: str, value: Any, *, filename: str, send_value: bool, max_bytes: int) -> C.FinalMessage:
    """The message that ends a cell: ``outcome`` is "ok" (value), "error" or "interrupted" (the exception),
    or "exit" (a script's exit code)."""
    if outcome in ("error", "interrupted"):
        return {"t": C.FAILED, "summary": summary(value), "traceback": user_traceback(value, filename),
                "at": time.time(), "interrupted": outcome == "interrupted"}
    if outcome == "exit":
        failed = _failed(f"SystemExit: the script exited with code {value}")
        failed["code"] = value
        return failed
    if not send_value:
        return {"t": C.RESULT, "value": None, "repr": None, "at": time.time()}
    return _value_message(value, max_bytes)
