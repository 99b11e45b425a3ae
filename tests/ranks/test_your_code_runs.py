"""The notebook's own modules on the ranks of real runs, in this process's folder (the kernel's): an edited module is
seen by the next run on the embedded Spark session and with ``--local``, and kept ranks reload it before their next
cell, saying so. (Executors that cannot see the folder: tests/cluster/test_your_code.py and test_connect.py.)"""
from __future__ import annotations

import jupyter_torchdist as jt
from jupyter_torchdist.kernel.cell import kept_cell
from jupyter_torchdist.kernel.pickling import pack

from ..support import helpers


def _kept_cell(ranks: jt.Ranks, source: str) -> tuple[list, str]:
    """A kept cell's values and rank 0's output (what the notebook shows under the cell)."""
    cell = kept_cell(source, "<kept>", {}, ranks.rank_names)
    result = ranks.execute(pack(cell, max_bytes=1 << 20), ranks.options, title="kept", filename="<kept>",
                           source="\n" + source)
    return result.value, "".join(line for _, line in result.logs[0])


def test_an_edited_module_is_seen_by_the_next_run(backend, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the notebook's folder
    module = tmp_path / "jtd_edited_module.py"
    module.write_text("VALUE = 1\n")
    local = backend == "local"
    assert jt.run(helpers.module_value, "jtd_edited_module", n=2, local=local, all_ranks=True) == [1, 1]
    module.write_text("VALUE = 2\n")  # same size, same second: no __pycache__ may answer for it
    assert jt.run(helpers.module_value, "jtd_edited_module", n=2, local=local, all_ranks=True) == [2, 2]


def test_kept_ranks_reload_a_module_edited_between_cells_and_say_which(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    module = tmp_path / "jtd_kept_module.py"
    module.write_text("VALUE = 1\n")
    with jt.Ranks(n=2, local=True, all_ranks=True) as ranks:
        assert _kept_cell(ranks, "import jtd_kept_module\njtd_kept_module.VALUE")[0] == [1, 1]
        values, said = _kept_cell(ranks, "jtd_kept_module.VALUE")
        assert values == [1, 1] and "reloaded" not in said
        module.write_text("VALUE = 3\n")
        values, said = _kept_cell(ranks, "jtd_kept_module.VALUE")
        assert values == [3, 3] and "reloaded jtd_kept_module (edited since the last cell)" in said, said
