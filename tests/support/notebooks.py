"""Running the example notebooks as a user would (nbclient, a real kernel), and reading what they left."""
from __future__ import annotations

from typing import Any

import pytest


MIME = "application/vnd.jupyter-torchdist.run+json"
POOL_TIMEOUT_S = 2400  # the first test to read a notebook runs the whole pool (support/pool.py): about 15 minutes
# The mark of every test that reads a pooled notebook (under -n they share one worker: support/workers.py)
POOLED = pytest.mark.timeout(POOL_TIMEOUT_S)


def execute_example(name: str, *, store_widget_state: bool = False) -> Any:
    """``examples/<name>`` as executed top to bottom in a fresh kernel, from the examples folder, as a reader's (the
    warm-up on), through the pool every notebook of the tests runs in (``pool.py``). ``store_widget_state``: the
    example keeps its widget state (``pool.WIDGET_STATE`` lists those)."""
    pytest.importorskip("nbformat")
    from .pool import WIDGET_STATE, example

    assert store_widget_state == (name in WIDGET_STATE), f"{name}: pool.WIDGET_STATE says which keep widget state"
    return example(name)


def outputs(nb: Any) -> list[Any]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def errors(nb: Any) -> list[Any]:
    return [o.get("traceback") for o in outputs(nb) if o.output_type == "error"]


def stream_text(nb: Any) -> str:
    """Every cell's printed text, cells apart by a line: a cell's stream outputs joined as printed (a display a
    background thread publishes flushes the cell's stdout, so one print may come as two stream outputs)."""
    return "\n".join("".join(o.get("text", "") for o in c.get("outputs", []) if o.output_type == "stream")
                     for c in nb.cells if c.cell_type == "code")


def reports(nb: Any) -> list[dict[str, Any]]:
    """Every run report the notebook shows (the run+json MIME data), in order."""
    return [o["data"][MIME] for o in outputs(nb) if MIME in o.get("data", {})]
