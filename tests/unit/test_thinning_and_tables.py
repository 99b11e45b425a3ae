"""The one way curves and queues are thinned (core/thinning.py) and the one plain-text table (views/table.py)."""
from __future__ import annotations

from jupyter_torchdist.core.brief import evenly
from jupyter_torchdist.views.report_text import text_table


def test_thinning_keeps_the_first_and_the_newest_and_spreads_the_rest_evenly():
    assert evenly(list(range(5)), 10) == [0, 1, 2, 3, 4]
    assert evenly(list(range(101)), 5) == [0, 25, 50, 75, 100]
    thinned = evenly(list(range(1000)), 7)
    assert len(thinned) == 7 and thinned[0] == 0 and thinned[-1] == 999
    gaps = {b - a for a, b in zip(thinned, thinned[1:])}
    assert max(gaps) - min(gaps) <= 1
    assert evenly([1, 2, 3], 1) == [3] and evenly([1, 2, 3], 0) == []


def test_the_table_aligns_cuts_rules_and_leaves_a_free_last_column():
    lines = text_table(["rank", "state", "note"], [["0", "done", "fine"], ["10", "failed", "a long line"]],
                       right={0}, rule=True, free_last=True)
    assert lines == ["rank  state   note", "----  ------  ----", "   0  done    fine", "  10  failed  a long line"]
    assert text_table(["a", "b"], [["xxxxxx", "y"]], widest=3) == ["a    b", "xxx  y"]
