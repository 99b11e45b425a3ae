"""Unit: a cell becomes a function that captures exactly what it uses."""
from __future__ import annotations

import linecache
import subprocess
import sys
import textwrap

import cloudpickle
import pytest

from jupyter_torchdist.kernel.pickling import pack, referenced_globals
from jupyter_torchdist.kernel.cell import CellSyntaxError, compile_cell


def test_trailing_expression_is_the_value():
    fn = compile_cell("a = 2\na * 21", {}).fn
    assert fn() == 42


def test_explicit_return_and_no_value():
    assert compile_cell("if True:\n    return 'early'\n1", {}).fn() == "early"
    assert compile_cell("x = 1", {}).fn() is None
    assert compile_cell("", {}).fn() is None


def test_line_numbers_are_the_cells_own():
    cell = compile_cell("a = 1\nb = 2\nraise ValueError('line three')", {})
    with pytest.raises(ValueError) as info:
        cell.fn()
    frames = [f for f in __import__("traceback").extract_tb(info.value.__traceback__) if f.filename == cell.filename]
    assert frames[-1].lineno == 3
    assert frames[-1].line == "raise ValueError('line three')"  # source registered for tracebacks
    assert linecache.getline(cell.filename, 2) == "b = 2\n"


def test_syntax_errors_are_reported_with_cell_position():
    with pytest.raises(CellSyntaxError) as info:
        compile_cell("x = 1\ny = (", {})
    assert info.value.lineno == 2
    with pytest.raises(CellSyntaxError, match="yield"):
        compile_cell("yield 1", {})
    with pytest.raises(CellSyntaxError, match="global"):
        compile_cell("global x\nx = 1", {})


def test_captures_only_what_the_cell_uses():
    ns: dict = {"__name__": "__main__"}
    exec(textwrap.dedent("""
        import math
        SCALE = 3
        BIG = bytearray(50_000_000)
        class Model:
            def out(self, v):
                return v * SCALE
        def helper(v):
            return Model().out(v) + math.floor(0.5)
    """), ns)
    cell = compile_cell("helper(14)", ns)
    assert set(referenced_globals(cell.fn)) == {"helper"}
    payload = pack(cell.fn, max_bytes=1 << 20).data
    assert len(payload) < 20_000, "BIG must not be shipped"
    # in a fresh interpreter with none of the notebook's definitions
    code = ("import sys, cloudpickle; fn, a, k = cloudpickle.loads(sys.stdin.buffer.read()); "
            "print(fn(*a, **k))")
    out = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, check=True)
    assert out.stdout.decode().strip() == "42"


def test_cell_assignments_stay_local_to_the_run():
    ns = {"x": 1}
    fn = compile_cell("x = 5\ndef f():\n    return x\nf()", ns).fn
    assert fn() == 5 and ns["x"] == 1


def test_unpack_round_trip():
    fn, args, kwargs = cloudpickle.loads(pack(max, (1, 5), {}, max_bytes=1 << 20).data)
    assert fn(*args, **kwargs) == 5
    assert cloudpickle.loads(cloudpickle.dumps(compile_cell("1+1", {}).fn))() == 2
