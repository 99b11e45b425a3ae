"""Unit: views draw snapshots; the text view prints each rank's new lines once, widget HTML is escaped."""
from __future__ import annotations

import io

from jupyter_torchdist.state import RunState
from jupyter_torchdist.views.text import TextView
from jupyter_torchdist.views.widget import log_html, table_html


def _state():
    st = RunState(2, title="%%distribute -n 2", backend="spark local[4]", started_at=0.0)
    for r in range(2):
        st.apply(r, "rank", {"t": "hello", "host": f"h{r}"}, 0.1)
        st.apply(r, "rank", {"t": "state", "state": "running"}, 0.2)
    return st


def test_text_view_prints_state_changes_and_new_lines_once():
    out = io.StringIO()
    view = TextView(out)
    st = _state()
    view.start(st.snapshot())
    st.apply(1, "rank", {"t": "log", "stream": "stdout", "text": "epoch 1"}, 1.0)
    view.update(st.snapshot(log_tail=view.log_tail))
    view.update(st.snapshot(log_tail=view.log_tail))  # nothing new: nothing printed twice
    st.apply(1, "rank", {"t": "log", "stream": "stderr", "text": "warning!"}, 1.1)
    view.update(st.snapshot(log_tail=view.log_tail))
    text = out.getvalue()
    assert "[rank 0] running on h0" in text and "[rank 1] running on h1" in text
    assert text.count("[rank 1] epoch 1") == 1 and "[rank 1!] warning!" in text


def test_text_view_says_when_lines_were_skipped():
    out = io.StringIO()
    view = TextView(out)
    st = _state()
    for i in range(30):
        st.apply(0, "rank", {"t": "log", "text": f"l{i}"}, 1.0)
    view.update(st.snapshot(log_tail=10))
    assert "20 lines not shown" in out.getvalue() and "l29" in out.getvalue() and "l5 " not in out.getvalue()


def test_widget_html_escapes_and_marks_states():
    st = _state()
    st.apply(0, "rank", {"t": "log", "text": "<script>alert(1)</script>"}, 1.0)
    st.apply(1, "rank", {"t": "failed", "summary": "ValueError: <b>bad</b>"}, 1.0)
    snap = st.snapshot(log_tail=50)
    table = table_html(snap)
    assert "<script>" not in table and "&lt;script&gt;" in table
    assert 'data-state="running"' in table and 'data-state="failed"' in table
    assert "<b>bad</b>" not in table
    assert "&lt;script&gt;" in log_html(snap["ranks"][0])


def test_widget_table_for_64_ranks_scrolls():
    st = RunState(64, started_at=0.0)
    table = table_html(st.snapshot())
    assert table.count('class="jtd-rank"') == 64 and "max-height" in table and "overflow:auto" in table


def test_stock_widget_view_draws_then_leaves_the_run_report_in_its_place(monkeypatch, request):
    """The fallback where the anywidget front end is not built: same protocol, same ending."""
    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_torchdist.run_report import MIME_TYPE
    from jupyter_torchdist.views.widget import WidgetView

    calls = []

    class Recorder:
        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
            calls.append((data, (transient or {}).get("display_id"), update))

    monkeypatch.setattr(InteractiveShell.instance(), "display_pub", Recorder())
    request.addfinalizer(InteractiveShell.clear_instance)  # no stray shell for later tests' get_ipython()
    st = _state()
    view = WidgetView()
    view.start(st.snapshot(log_tail=view.log_tail))
    st.apply(0, "rank", {"t": "progress", "step": 3, "total": 10}, 1.0)
    view.update(st.snapshot(log_tail=view.log_tail))
    assert 'data-state="running"' in view.table.value and "3/10" in view.table.value
    st.status = "succeeded"
    view.finish(st.snapshot(log_tail=view.log_tail))
    (first, display_id, update), (last, last_id, last_update) = calls[0], calls[-1]
    assert "application/vnd.jupyter.widget-view+json" in first and not update
    assert last_update and last_id == display_id and last[MIME_TYPE]["status"] == "succeeded"
