"""What a tracked run records as its code: a cell's source, a script under its own name, a function's own source;
never this package's wrappers."""
from __future__ import annotations

from types import SimpleNamespace

from jupyter_torchdist.kernel.script_source import script_function
from jupyter_torchdist.tracking.recorder import _code


def train(lr: float = 0.1) -> float:
    return lr * 2


def test_a_cell_a_script_and_a_function_are_recorded_as_what_ran(tmp_path):
    assert _code(SimpleNamespace(source="%%distribute -n 2\nx = 1", fn=None)) == [
        ("cell.py", "%%distribute -n 2\nx = 1")]
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    work = SimpleNamespace(source="", fn=script_function([str(script), "--epochs", "1"]))
    script.write_text("print('edited since')\n")
    assert _code(work) == [("train.py", "print('hi')\n")]   # as it ran
    [(name, text)] = _code(SimpleNamespace(source="", fn=train))
    assert name == "source.py" and text.startswith("def train(lr: float = 0.1)")


def test_what_has_no_source_records_none():
    assert _code(SimpleNamespace(source="", fn=len)) == []          # a builtin
    assert _code(SimpleNamespace(source="", fn=eval("lambda: 1"))) == []   # no file behind it
    assert _code(SimpleNamespace(source="", fn=train.__call__)) == []              # a method-wrapper
