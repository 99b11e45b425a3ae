"""Unit: a kept cell is module code in the rank's own namespace; notebook values fill in what the ranks lack."""
from __future__ import annotations

import threading

import cloudpickle
import pytest

from jupyter_torchdist.kernel.cell import CellSyntaxError
from jupyter_torchdist.kernel.cell import kept_cell
from jupyter_torchdist.rank.kept_payload import KeptCell, Namespace, run_job


def _run(ns: Namespace, cell: KeptCell):
    return run_job(cloudpickle.dumps((cell, (), {})), ns)


def test_names_a_cell_assigns_are_the_ranks_globals_and_global_statements_update_them():
    ns = Namespace()
    assert _run(ns, kept_cell("step = 0\ndef bump():\n    global step\n    step += 1\n", "<c1>", {}, set())) is None
    assert _run(ns, kept_cell("bump(); bump()\nstep", "<c2>", {}, ns.own_names())) == 2
    assert {"step", "bump"} <= ns.own_names()


def test_notebook_values_are_shipped_only_where_the_ranks_lack_the_name():
    notebook = {"lr": 0.1, "model": "notebook's", "unused": 1, "In": [], "_": 5, "print": print}
    cell = kept_cell("(lr, model)", "<c>", notebook, rank_names={"model"})
    assert cell.shipped == {"lr": 0.1}, "ranks' own names win; IPython's and builtins never travel"


def test_a_new_notebook_value_replaces_a_shipped_one_but_not_the_ranks_own():
    ns = Namespace()
    assert _run(ns, kept_cell("lr", "<c1>", {"lr": 0.1}, ns.own_names())) == 0.1
    assert "lr" not in ns.own_names(), "a shipped value is the notebook's, not the rank's"
    assert _run(ns, kept_cell("lr", "<c2>", {"lr": 0.01}, ns.own_names())) == 0.01
    _run(ns, kept_cell("lr = lr * 10", "<c3>", {"lr": 0.01}, ns.own_names()))
    assert "lr" in ns.own_names(), "reassigned on the rank: now the rank's own"
    assert _run(ns, kept_cell("lr", "<c4>", {"lr": 5.0}, ns.own_names())) == 0.1


def test_line_numbers_are_the_notebooks_own():
    ns = Namespace()
    with pytest.raises(ZeroDivisionError) as info:
        _run(ns, kept_cell("x = 1\ny = 1 / 0\n", "Cell In[7]", {}, set()))
    frames = [f for f in __import__("traceback").extract_tb(info.value.__traceback__) if f.filename == "Cell In[7]"]
    assert frames[-1].lineno == 3, "the magic line is line 1"


@pytest.mark.parametrize("source", ["return 1", "x = 1\nyield x", "await thing()"])
def test_top_level_return_yield_await_are_refused_before_anything_runs(source):
    with pytest.raises(CellSyntaxError) as info:
        kept_cell(source, "Cell In[3]", {}, set())
    assert "--keep cell runs as module code" in str(info.value)


def test_syntax_errors_name_the_notebook_line():
    with pytest.raises(CellSyntaxError) as info:
        kept_cell("x = 1\ny = (\n", "Cell In[4]", {}, set())
    assert info.value.filename == "Cell In[4]" and info.value.lineno >= 3


def test_an_unpicklable_notebook_value_is_named():
    from jupyter_torchdist.core.errors import CaptureError
    from jupyter_torchdist.kernel.pickling import pack

    cell = kept_cell("with my_lock:\n    pass", "<c>", {"my_lock": threading.Lock()}, set())
    with pytest.raises(CaptureError, match="`my_lock`"):
        pack(cell, max_bytes=1 << 20, named=cell.shipped)
