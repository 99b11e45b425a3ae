"""Unit: the anywidget live view (views/live.py) without a browser: size bounds of what it syncs,
the view chosen by make_view, and the RunView protocol ending in the saved run report."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from typing import Any

import pytest

from jupyter_torchdist.kernel.state.run import RunState
from jupyter_torchdist.views import NullView, live, make_view
from jupyter_torchdist.views.display import DisplayView
from jupyter_torchdist.views.live import LiveView, RunWidget, live_snapshot
from jupyter_torchdist.views.report import MIME_TYPE
from jupyter_torchdist.views.text import TextView
from jupyter_torchdist.views.trim import LIVE

LIVE_LOG_LINES, LIVE_CURVE_MAX = LIVE.log_lines, LIVE.curve_max

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _busy_run(n: int, lines: int, steps: int, line_chars: int = 300) -> RunState:
    """A run that has been going a while: long logs, long loss curves, one failed rank."""
    st = RunState(n, title=f"%%distribute -n {n}", backend="spark local[4]", started_at=0.0)
    for r in range(n):
        st.apply(r, "rank", {"t": "hello", "host": f"worker-{r // 8}.cluster.internal"}, 0.1)
        st.apply(r, "rank", {"t": "state", "state": "running"}, 0.2)
        for i in range(steps):
            st.apply(r, "rank", {"t": "progress", "step": i + 1, "total": steps,
                                 "metrics": {"loss": 1.0 / (i + 1), "acc": 0.5, "lr": 1e-3}}, 1.0 + i)
        for i in range(lines):
            st.apply(r, "rank", {"t": "log", "text": f"line {i} " + "x" * line_chars}, 2.0)
    st.apply(n - 1, "rank", {"t": "failed", "summary": "ValueError: nan loss", "traceback": "Traceback...\n" * 500},
             3.0)
    st.now = 10.0
    return st


# -- what is synced ----------------------------------------------------------------------------

def test_live_snapshot_of_64_busy_ranks_stays_small_and_json_safe():
    st = _busy_run(64, lines=600, steps=1000)
    raw = st.snapshot(log_tail=LiveView.log_tail)
    snap = live_snapshot(raw)
    text = json.dumps(snap, allow_nan=False)
    assert len(text) < 120_000, len(text)  # at 10 updates a second: about 1 MB/s at most
    assert len(snap["ranks"]) == 64
    for r in snap["ranks"]:
        assert 1 <= len(r["log_tail"]) <= LIVE_LOG_LINES
        assert r["log_tail"][-1][1].startswith("line 599 "), "the newest line is always there"
        assert r["log_lines"] == 600, "the view can say how many lines there are in all"
        assert 2 <= len(r["loss_history"]) <= LIVE_CURVE_MAX
        assert r["loss_history"][-1] == [1000.0, 0.001], "the newest point is always there"
    failed, other = snap["ranks"][63], snap["ranks"][0]
    assert len(failed["log_tail"]) > len(other["log_tail"]), "a failed rank's log gets a bigger share"
    assert raw["ranks"][0]["log_tail"] is not snap["ranks"][0]["log_tail"] and len(raw["ranks"][0]["log_tail"]) == 50


def test_live_snapshot_keeps_a_small_run_whole():
    st = _busy_run(4, lines=30, steps=150, line_chars=40)
    raw = st.snapshot(log_tail=LiveView.log_tail)
    snap = live_snapshot(raw)
    for before, after in zip(raw["ranks"], snap["ranks"]):
        assert after["log_tail"] == before["log_tail"] and len(after["log_tail"]) == 30
        assert after["loss_history"] == before["loss_history"]
        assert after["step"] == before["step"] == 150 and after["metrics"] == before["metrics"]
    assert snap["error"]["rank"] == 3 and "ValueError: nan loss" in snap["error"]["summary"]
    assert snap["status"] == raw["status"] and snap["elapsed_s"] == raw["elapsed_s"]


def test_live_snapshot_survives_odd_input():
    snap = live_snapshot({"ranks": [{"rank": 0, "log_tail": "not a list", "loss_history": None},
                                    {"rank": 1, "log_tail": [["stdout", "x"]] * 100,
                                     "loss_history": [[0, float("nan")], [1, 2.0]]}, "junk"]})
    json.dumps(snap, allow_nan=False)
    assert snap["ranks"][0]["log_tail"] == [] and len(snap["ranks"][1]["log_tail"]) == LIVE_LOG_LINES
    assert snap["ranks"][1]["loss_history"] == [[1, 2.0]]


# -- which view --------------------------------------------------------------------------------

class _NotebookShell:
    """Stands for ZMQInteractiveShell: make_view only asks whether the shell has a kernel."""
    kernel = object()


class TerminalInteractiveShell:
    pass


class _KernelLessShell:
    """A plain InteractiveShell (embedded IPython, a test): no kernel, so no front end to draw a widget."""
    kernel = None


@pytest.fixture
def built(tmp_path, monkeypatch):
    """A stand-in for the built front end, so these tests need no Node."""
    esm, css = tmp_path / "widget.js", tmp_path / "widget.css"
    esm.write_text("export default { render() {} };\n")
    css.write_text(".jp-TorchDist {}\n")
    monkeypatch.setattr(live, "ESM", esm)
    monkeypatch.setattr(live, "CSS", css)
    return esm, css


def test_make_view_prefers_the_live_view_when_its_front_end_is_built(built):
    assert isinstance(make_view(_NotebookShell()), LiveView)
    assert isinstance(make_view(_NotebookShell(), quiet=True), NullView)
    assert isinstance(make_view(TerminalInteractiveShell()), TextView)
    assert isinstance(make_view(None), TextView)
    assert isinstance(make_view(_KernelLessShell()), TextView)


def test_make_view_falls_back_to_the_redrawn_report_without_a_built_front_end(built):
    built[0].unlink()
    assert isinstance(make_view(_NotebookShell()), DisplayView)


def test_make_view_falls_back_to_the_redrawn_report_without_anywidget(built, monkeypatch):
    monkeypatch.delitem(sys.modules, "jupyter_torchdist.views.live")
    monkeypatch.setitem(sys.modules, "anywidget", None)  # import anywidget raises ImportError
    assert isinstance(make_view(_NotebookShell()), DisplayView)


# -- the RunView protocol ----------------------------------------------------------------------

class _Recorder:
    """Records what IPython's display machinery publishes (display and update_display)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs) -> None:
        self.calls.append({"data": data, "transient": transient or {}, "update": update})

    def clear_output(self, wait: bool = False) -> None:
        pass


@pytest.fixture
def published(monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    recorder = _Recorder()
    monkeypatch.setattr(shell, "display_pub", recorder)
    yield recorder.calls
    InteractiveShell.clear_instance()  # no stray shell for later tests' get_ipython()


def test_live_view_syncs_snapshots_then_leaves_the_run_report_in_its_place(built, published):
    st = _busy_run(2, lines=5, steps=10, line_chars=10)
    st.status = "running"
    view = LiveView()
    view.start(st.snapshot(log_tail=view.log_tail))
    widget = view.widget
    assert isinstance(widget, RunWidget) and widget.comm is not None
    assert widget._esm == built[0].read_text() and widget._css == built[1].read_text()
    [shown] = published
    display_id = shown["transient"]["display_id"]
    assert WIDGET_VIEW in shown["data"] and not shown["update"]
    assert shown["data"][WIDGET_VIEW]["model_id"] == widget.model_id

    st.apply(0, "rank", {"t": "progress", "step": 11, "total": 20, "metrics": {"loss": 0.05}}, 4.0)
    view.update(st.snapshot(log_tail=view.log_tail))
    assert widget.snapshot["ranks"][0]["step"] == 11 and widget.snapshot["status"] == "running"
    assert len(published) == 1, "updates go through the widget, not new outputs"

    st.status, st.ended_at = "succeeded", 5.0
    final = st.snapshot(log_tail=view.log_tail)
    view.finish(final)
    assert widget.snapshot["status"] == "succeeded", "the widget's last state is the end of the run"
    assert widget.comm is None, "the widget is closed"
    last = published[-1]
    assert last["update"] and last["transient"]["display_id"] == display_id, "replaced in place"
    report = last["data"][MIME_TYPE]
    assert report["status"] == "succeeded" and [r["step"] for r in report["ranks"]] == [11, 10]
    assert "text/html" in last["data"] and "text/plain" in last["data"]


def test_live_view_shows_the_report_even_if_it_never_started(built, published):
    view = LiveView()
    view.finish(_busy_run(2, lines=1, steps=1).snapshot())
    assert MIME_TYPE in published[-1]["data"] and not published[-1]["update"]


def test_a_foreground_run_that_ends_in_a_blink_shows_its_report_and_no_widget(built, published):
    """make_view's foreground view waits SHOW_AFTER_S: a kept cell that ends sooner sends the report alone."""
    view = make_view(_NotebookShell())
    assert isinstance(view, LiveView) and view.show_after == live.SHOW_AFTER_S > 0
    st = _busy_run(2, lines=1, steps=1)
    st.status = "running"
    view.start(st.snapshot(log_tail=view.log_tail))
    hold = view.update(st.snapshot(log_tail=view.log_tail))
    assert view.widget is None and published == []
    assert hold is not None and 0 < hold <= live.SHOW_AFTER_S, "the supervisor is asked to draw again when it is due"
    st.status, st.ended_at = "succeeded", 5.0
    view.finish(st.snapshot(log_tail=view.log_tail))
    [shown] = published
    assert MIME_TYPE in shown["data"] and WIDGET_VIEW not in shown["data"] and not shown["update"]


def test_a_foreground_run_that_goes_on_gets_its_widget_when_due(built, published, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(live.time, "monotonic", lambda: clock[0])
    view = LiveView(show_after=0.3)
    st = _busy_run(2, lines=1, steps=1)
    st.status = "running"
    view.start(st.snapshot(log_tail=view.log_tail))
    assert view.update(st.snapshot(log_tail=view.log_tail)) == pytest.approx(0.3) and view.widget is None
    clock[0] += 0.31
    view.update(st.snapshot(log_tail=view.log_tail))
    assert isinstance(view.widget, RunWidget) and WIDGET_VIEW in published[0]["data"]
    paused = LiveView(show_after=0.3)
    paused.start(st.snapshot())
    snap = st.snapshot()
    snap["ranks"][1]["paused"] = "pdb"
    paused.update(snap)
    assert paused.widget is not None, "a rank at a pdb prompt wants the user: the view shows at once"
    queued = LiveView(show_after=0.3)
    queued.start({**st.snapshot(), "status": "queued"})
    assert queued.widget is not None, "a queued run's view is drawn at once: it says what it waits for"


# -- the built front end -----------------------------------------------------------------------

def test_built_widget_module_exports_a_render_function():
    if not live.live_available():
        pytest.skip("front end not built (cd labextension && jlpm build:prod)")
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node to import the module with")
    code = ("import(process.argv[1]).then(m => console.log(typeof m.default.render))"
            ".catch(e => { console.error(e); process.exit(1); })")
    out = subprocess.run([node, "-e", code, live.ESM.as_uri()], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "function", out.stderr
    assert "jp-TorchDist-" in live.CSS.read_text()


def test_display_view_redraws_the_report_in_place_and_ends_with_it(published, monkeypatch):
    """The fallback where the widget's front end is not built: the same report, redrawn in place."""
    from jupyter_torchdist.views import display

    clock = [100.0]
    monkeypatch.setattr(display.time, "monotonic", lambda: clock[0])
    st = _busy_run(2, lines=5, steps=10, line_chars=10)
    view = DisplayView()
    view.start(st.snapshot(log_tail=view.log_tail))
    st.apply(0, "rank", {"t": "progress", "step": 11, "total": 20}, 4.0)
    view.update(st.snapshot(log_tail=view.log_tail))  # too soon after the first frame: skipped
    clock[0] += display.FRAME_S
    view.update(st.snapshot(log_tail=view.log_tail))
    st.close_out(5.0)
    st.conclude(5.0, timeout=None, value_needed=False)
    view.finish(st.snapshot(log_tail=view.log_tail))
    first, *updates = published
    assert not first["update"] and len(updates) == 2 and all(u["update"] for u in updates)
    ids = {c["transient"]["display_id"] for c in published}
    assert len(ids) == 1, "one output, redrawn in place"
    assert updates[0]["data"][MIME_TYPE]["ranks"][0]["step"] == 11
    assert updates[-1]["data"][MIME_TYPE]["status"] == "failed"


@pytest.mark.slow  # seconds: waits out the widget's close
def test_a_finished_background_runs_widget_closes_once_the_front_end_put_its_report_in_place(built, published):
    """What a finished background run's view keeps in the kernel: its widget until the front end (report.ts) says
    the report is in the widget's place, then nothing of its state (measured against 100 KB per run)."""
    import gc
    import tracemalloc

    import ipywidgets.widgets.widget as ipw

    # the open widgets, wherever this ipywidgets keeps them (8.1: a module dict; 8.0: a class attribute)
    open_widgets = ipw._instances if hasattr(ipw, "_instances") else ipw.Widget._active_widgets

    def finished_view() -> tuple[LiveView, str]:
        st = _busy_run(8, lines=400, steps=300)
        view = LiveView(background=True)
        view.start(st.snapshot(log_tail=view.log_tail))
        view.finish(st.snapshot(log_tail=view.log_tail))
        assert view.widget is not None and view.widget.report
        return view, view.widget.model_id

    held, held_id = finished_view()  # no word from a front end: the widget stays (it shows the run's last frame)
    held.widget._handle_custom_msg({"event": "something else"}, [])
    assert held.widget.comm is not None and held_id in open_widgets

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    views = []
    for _ in range(10):
        views.append(finished_view())
        published.clear()  # what the display machinery sent is the front end's, not the kernel's
    for view, _ in views:
        view.widget._handle_custom_msg({"event": live.REPORT_PLACED}, [])
    gc.collect()
    per_run = (tracemalloc.get_traced_memory()[0] - before) / len(views)
    tracemalloc.stop()
    assert all(view.widget.comm is None and model_id not in open_widgets for view, model_id in views)
    assert all(view.widget.snapshot == {} and view.widget.report == {} for view, _ in views)
    assert per_run < 100_000, f"{per_run / 1000:.0f} KB kept per finished background run"
    held.widget.close()
