"""Running the example notebooks as a user would (nbclient, a real kernel), and reading what they left."""
from __future__ import annotations

from typing import Any

import pytest

from . import EXAMPLES, ROOT

MIME = "application/vnd.jupyter-torchdist.run+json"
EXECUTED = ROOT / "build" / "executed"  # git-ignored; the docs render these copies (docs/conf.py)


def execute_example(name: str, *, store_widget_state: bool = False) -> Any:
    """Execute ``examples/<name>`` top to bottom in a fresh kernel, from the examples folder; the notebook.

    The executed notebook is also written to ``build/executed/<name>``, for the docs' examples pages."""
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    nb = nbformat.read(EXAMPLES / name, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", store_widget_state=store_widget_state,
                   resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    EXECUTED.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(EXECUTED / name))
    return nb


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
