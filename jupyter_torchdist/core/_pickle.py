"""cloudpickle as every side of a run uses it: code objects keep their filename.

cloudpickle 3.1.3 and later write ``<dynamic-code>`` as the filename of every code object it ships, which
cuts a rank's traceback (and a data transform's) off from the cell lines registered under ``Cell In[5]``
(``_sources``). The pickler here keeps the real filename; everything else is cloudpickle's.
"""
from __future__ import annotations

import io
import types
from typing import Any

import cloudpickle

__all__ = ["Pickler", "dumps", "code_named"]

_code_reduce = getattr(cloudpickle.cloudpickle, "_code_reduce", None)


def code_named(args: tuple[Any, ...], filename: str) -> types.CodeType:
    """Rebuild a pickled code object under its own filename."""
    return types.CodeType(*args).replace(co_filename=filename)


class Pickler(cloudpickle.Pickler):  # type: ignore[misc]
    """cloudpickle's pickler, keeping each code object's filename."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, types.CodeType) and _code_reduce is not None:
            _, args = _code_reduce(obj)
            return code_named, (args, obj.co_filename)
        return super().reducer_override(obj)


def dumps(obj: Any, pickler: type[Pickler] = Pickler) -> bytes:
    """Pickle ``obj`` (protocol 5) with ``pickler``."""
    buf = io.BytesIO()
    pickler(buf, protocol=5).dump(obj)
    return buf.getvalue()
