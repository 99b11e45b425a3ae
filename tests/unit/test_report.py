"""Unit: the saved run report (jupyter_torchdist.views.report): escaping, failures, size bounds, text."""
from __future__ import annotations

import copy
import json
import re
import subprocess
import sys

import pytest

from jupyter_torchdist.views.report import MIME_TYPE, RunReport, report_bundle
from jupyter_torchdist.views.report_html import report_html
from jupyter_torchdist.views.report_text import report_text
from jupyter_torchdist.views.trim import REPORT, trim_snapshot

from jupyter_torchdist.kernel.state.run import RunState

LOG_TAIL_LINES = REPORT.log_lines

EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)>" onmouseover="alert(2)'
TAGS = re.compile(r"<\s*(script|img|iframe|style|link)\b", re.I)


def _rank(rank: int, **over) -> dict:
    base = {
        "rank": rank, "host": f"node-{rank // 8}", "state": "done", "step": 10, "total": 10, "rate": 12.5,
        "metrics": {"loss": 0.1, "acc": 0.93}, "last_line": "epoch 3 done", "elapsed_s": 1.0, "exit_code": 0,
        "exit_signal": None, "error": None, "log_lines": 3,
        "log_tail": [["stdout", "hello"], ["stderr", "warning: slow"], ["stdout", "bye"]],
        "loss_history": [[0, 1.0], [5, 0.5], [10, 0.1]],
    }
    base.update(over)
    return base


def _snap(n: int = 2, **over) -> dict:
    base = {
        "version": 1, "title": f"%%distribute -n {n}", "status": "succeeded", "headline": "finished",
        "backend": "spark local[4]", "options": {"n": n, "gpu": False, "timeout": None}, "world_size": n,
        "elapsed_s": 1.23, "value_repr": "[0.5, 0.25]", "error": None,
        "ranks": [_rank(r) for r in range(n)],
    }
    base.update(over)
    return base


def _failed(n: int = 4) -> dict:
    snap = _snap(n, status="failed", headline="rank 2 failed", value_repr=None)
    snap["ranks"][2].update(state="failed", error="ValueError: bad batch 17", exit_code=1, step=3,
                            log_tail=[["stdout", "loading"], ["stderr", "ValueError: bad batch 17"]])
    snap["ranks"][0].update(state="stopped", error="RuntimeError: Connection closed by peer", exit_code=None,
                            exit_signal="SIGTERM", step=4)
    snap["error"] = {
        "rank": 2, "host": "node-0", "kind": "exception", "summary": "ValueError: bad batch 17",
        "traceback": 'Traceback (most recent call last):\n  File "<cell>", line 7, in <module>\n'
                     "    check(batch)\nValueError: bad batch 17\n",
        "secondary": [{"rank": 0, "host": "node-0", "summary": "RuntimeError: Connection closed by peer"}],
    }
    return snap


def _text_of_html(markup: str) -> str:
    import html as _html

    return _html.unescape(re.sub(r"<[^>]+>", "", markup))


# -- escaping ----------------------------------------------------------------------------------

def test_hostile_strings_are_escaped_everywhere_in_html():
    snap = _failed(3)
    snap.update(title=EVIL, headline=EVIL, backend=EVIL, value_repr=EVIL, options={"output": EVIL})
    snap["error"].update(host=EVIL, summary=EVIL, traceback=f"Traceback:\n{EVIL}\n")
    snap["error"]["secondary"][0]["summary"] = EVIL
    for r in snap["ranks"]:
        r.update(host=EVIL, last_line=EVIL, error=EVIL, state=EVIL, metrics={EVIL: EVIL},
                 log_tail=[["stdout", EVIL], ["stderr", EVIL]])
    out = report_html(snap)
    assert not TAGS.search(out), TAGS.search(out)
    assert 'onmouseover="alert' not in out
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in out
    # The hostile text is shown, not dropped: once per field at least.
    assert _text_of_html(out).count('<script>alert("x")</script>') >= 10


def test_plain_text_and_mime_data_keep_the_text_verbatim():
    snap = _snap(1, value_repr=EVIL)
    bundle = report_bundle(snap)
    assert bundle[MIME_TYPE]["value_repr"] == EVIL  # the JSON is drawn with textContent in the extension
    assert EVIL in bundle["text/plain"]


def test_html_is_self_contained():
    out = report_html(_failed())
    assert "<style" not in out and "<script" not in out and "<link" not in out
    assert "class=" not in out.replace('class="jupyter-torchdist-report"', "")
    urls = set(re.findall(r"https?://[^\"' ]+", out))
    assert urls <= {"http://www.w3.org/2000/svg"}


# -- failures ----------------------------------------------------------------------------------

def test_failure_shows_root_rank_host_and_traceback():
    snap = _failed()
    out = report_html(snap)
    text = _text_of_html(out)
    assert "Rank 2 on node-0" in text and "raised an exception" in text
    assert re.search(r"<pre[^>]*>Traceback \(most recent call last\):", out)
    assert 'File "<cell>", line 7' in text
    assert "1 other rank failed too" in text and "RuntimeError: Connection closed by peer" in text
    # The root rank's log is the one opened.
    opened = re.findall(r"<details open[^>]*><summary[^>]*>rank (\d+)", out)
    assert opened == ["2"]

    plain = report_text(snap)
    assert plain.splitlines()[0].startswith("%%distribute -n 4 · FAILED")
    assert "ERROR: rank 2 on node-0 raised an exception: ValueError: bad batch 17" in plain
    assert "    check(batch)" in plain
    assert "also failed: rank 0 on node-0: RuntimeError: Connection closed by peer" in plain
    assert "| ValueError: bad batch 17" in plain  # the root rank's last output


def test_failure_from_a_real_run_state():
    st = RunState(3, title="%%distribute -n 3", started_at=100.0, backend="spark local[4]")
    for r in range(3):
        st.apply(r, "rank", {"t": "hello", "host": f"h{r}", "pid": 10 + r}, 100.1)
        st.apply(r, "rank", {"t": "state", "state": "running"}, 100.2)
        st.apply(r, "rank", {"t": "progress", "step": 1, "total": 5, "metrics": {"loss": 2.0}}, 100.3)
        st.apply(r, "rank", {"t": "log", "text": f"rank {r} <b>starting</b>"}, 100.3)
    st.apply(1, "rank", {"t": "failed", "summary": "ZeroDivisionError: division by zero",
                         "traceback": "Traceback (most recent call last):\nZeroDivisionError: division by zero",
                         "at": 101.0}, 101.0)
    st.apply(0, "rank", {"t": "failed", "summary": "RuntimeError: Connection closed by peer", "at": 101.5}, 101.5)
    st.apply(2, "agent", {"t": "exit", "code": None, "signal": "SIGTERM", "stopped": True}, 101.6)
    st.close_out(102.0)
    st.conclude(102.0, timeout=None, value_needed=True)
    snap = st.snapshot()
    bundle = report_bundle(snap)
    data = bundle[MIME_TYPE]
    assert data["error"]["rank"] == 1 and data["error"]["host"] == "h1"
    assert [r["state"] for r in data["ranks"]] == ["failed", "failed", "stopped"]
    assert "ERROR: rank 1 on h1" in bundle["text/plain"]
    assert "&lt;b&gt;starting&lt;/b&gt;" in bundle["text/html"] and "<b>starting" not in bundle["text/html"]
    json.dumps(bundle, allow_nan=False)


# -- many ranks and bounds ---------------------------------------------------------------------

def test_64_ranks_in_every_view():
    snap = _snap(64)
    snap["ranks"][17].update(state="failed", error="OSError: disk full")
    bundle = report_bundle(snap)
    assert [r["rank"] for r in bundle[MIME_TYPE]["ranks"]] == list(range(64))
    body = bundle["text/html"].split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    assert body.count("<tr") == 64
    assert "max-height:22em;overflow:auto" in bundle["text/html"]  # the table scrolls
    assert "64 ranks" in _text_of_html(bundle["text/html"])  # the loss legend gives up on colours
    rows = [line for line in bundle["text/plain"].splitlines() if re.match(r"^\s*\d+\s{2}node-", line)]
    assert [int(line.split()[0]) for line in rows] == list(range(64))
    assert "OSError: disk full" in rows[17]
    assert "ranks: 63 done, 1 failed" in bundle["text/plain"]


@pytest.mark.slow  # seconds: megabytes of logs and tracebacks trimmed for 64 ranks
def test_bundle_size_is_bounded():
    big_line = "x" * 5_000
    snap = _snap(64, value_repr="v" * 1_000_000)
    snap["error"] = {"rank": 3, "host": "h", "kind": "exception", "summary": "E" * 100_000,
                     "traceback": "T" * 1_000_000 + "\nValueError: the end", "secondary": []}
    for r in snap["ranks"]:
        r["log_lines"] = 20_000
        r["log_tail"] = [["stdout", f"{i} {big_line}"] for i in range(2_000)]
        r["loss_history"] = [[i, 1.0 / (i + 1)] for i in range(10_000)]
    original = copy.deepcopy(snap)

    bundle = report_bundle(snap)
    assert snap == original, "the caller's snapshot must not be modified"
    data = bundle[MIME_TYPE]
    size = len(json.dumps(bundle))
    assert size < 3_000_000, size
    for r in data["ranks"]:
        assert 1 <= len(r["log_tail"]) <= LOG_TAIL_LINES
        assert r["log_tail"][-1][1].startswith("1999 "), "the tail keeps the newest lines"
        assert all(len(t) < 600 for _, t in r["log_tail"])
        assert r["log_lines"] == 20_000
        assert len(r["loss_history"]) <= 200
        assert r["loss_history"][0] == [0, 1.0] and r["loss_history"][-1][0] == 9_999
    assert data["error"]["traceback"].endswith("ValueError: the end")
    assert len(data["error"]["traceback"]) < 25_000
    assert data["value_repr"].startswith("vvvv") and len(data["value_repr"]) < 11_000
    assert len(bundle["text/plain"]) < 100_000


def test_log_tail_keeps_the_last_lines_per_rank():
    snap = _snap(8)
    for r in snap["ranks"]:
        r["log_tail"] = [["stderr" if i % 2 else "stdout", f"line {i}"] for i in range(300)]
    for r in trim_snapshot(snap)["ranks"]:
        assert len(r["log_tail"]) == LOG_TAIL_LINES
        assert r["log_tail"][0] == ["stdout", f"line {300 - LOG_TAIL_LINES}"]
        assert r["log_tail"][-1] == ["stderr", "line 299"]


def test_small_logs_are_kept_whole():
    snap = _snap(2)
    assert trim_snapshot(snap)["ranks"][0]["log_tail"] == snap["ranks"][0]["log_tail"]
    assert trim_snapshot(snap)["ranks"][0]["loss_history"] == snap["ranks"][0]["loss_history"]


def test_json_safe_with_nan_and_odd_values():
    snap = _snap(2, elapsed_s=float("inf"))
    snap["ranks"][0].update(metrics={"loss": float("nan"), "note": object()}, rate=float("nan"),
                            loss_history=[[0, float("nan")], [1, 0.5]])
    bundle = report_bundle(snap)
    json.dumps(bundle, allow_nan=False)
    assert bundle[MIME_TYPE]["ranks"][0]["loss_history"] == [[1, 0.5]]


@pytest.mark.parametrize("snap", [{}, {"ranks": None}, {"ranks": [{}], "error": "boom"}, {"status": "running"}])
def test_partial_snapshots_render(snap):
    bundle = report_bundle(snap)
    assert set(bundle) == {MIME_TYPE, "text/html", "text/plain"}
    assert bundle["text/plain"].startswith("%%distribute")


# -- text table --------------------------------------------------------------------------------

def test_text_table_content():
    snap = _snap(2)
    snap["ranks"][1].update(step=5, total=20, rate=None, metrics={}, last_line="still going", state="running",
                            exit_code=None, elapsed_s=75.0)
    lines = report_text(snap).splitlines()
    assert lines[0] == "%%distribute -n 2 · SUCCEEDED · spark local[4] · 2 ranks · 1.23 s"
    assert "value (rank 0): [0.5, 0.25]" in lines
    header = next(line for line in lines if line.startswith("rank  "))
    assert header.split()[:7] == ["rank", "host", "state", "progress", "rate", "elapsed", "exit"]
    row0, row1 = (next(line for line in lines if re.match(rf"^\s*{i}\s", line)) for i in (0, 1))
    assert "done" in row0 and "10/10 100%" in row0 and "12.5 it/s" in row0 and "loss=0.1 acc=0.93" in row0
    assert re.search(r"1\.00 s\s+0\s+loss=", row0)  # elapsed, exit code, metrics
    assert "running" in row1 and "5/20  25%" in row1 and "1m 15s" in row1 and "still going" in row1
    assert "—" in row1  # no rate, no exit code yet
    # Columns line up: every row is as wide as the header up to the last column.
    start = header.index("metrics")
    assert row0[start - 2:start] == "  " and row1[start - 2:start] == "  "


# -- display -----------------------------------------------------------------------------------

def test_run_report_displays_through_ipython():
    formatters = pytest.importorskip("IPython.core.formatters")
    snap = _failed()
    data, _ = formatters.DisplayFormatter().format(RunReport(snap))
    assert data[MIME_TYPE]["error"]["rank"] == 2
    assert data["text/plain"] == report_text(snap)
    assert data["text/html"].startswith('<div class="jupyter-torchdist-report"')


def test_mimebundle_include_exclude():
    rep = RunReport(_snap(1))
    assert set(rep._repr_mimebundle_(include=["text/plain"])) == {"text/plain"}
    assert set(rep._repr_mimebundle_(exclude=["text/html"])) == {MIME_TYPE, "text/plain"}


def test_module_does_not_import_ipython():
    code = ("import sys\n"
            "from jupyter_torchdist.views.report import report_bundle\n"
            "report_bundle({'ranks': [{}]})\n"
            "print('IPython' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- where the time goes -----------------------------------------------------------------------

def _with_usage(snap: dict, waits=(0.12, 0.55), gpu=False) -> dict:
    for r, wait in zip(snap["ranks"], waits):
        r["usage"] = {"cpu_pct": 97.4, "rss": 812 << 20, "gpu_util": 85.0 if gpu else None,
                      "gpu_mem": (3 << 30) if gpu else None, "input_wait": wait, "rows": 640, "rows_per_s": 320.0}
    snap["data"] = {"workers": 2, "active": 1, "running": 1, "rows": 1280, "rows_per_s": 640.0, "seconds": 2.5}
    return snap


def test_usage_columns_and_the_data_line_in_text_and_html():
    snap = _with_usage(_snap(2))
    text = report_text(snap)
    assert "data: 2 workers (1 running) · 640 rows/s · 1,280 rows" in text
    header = next(line for line in text.splitlines() if line.startswith("rank  "))
    assert header.split()[:9] == ["rank", "host", "state", "progress", "rate", "cpu", "mem", "input", "wait"]
    assert "gpu" not in header.split(), "no GPU column on a CPU run"
    row1 = next(line for line in text.splitlines() if re.match(r"^\s*1\s", line))
    assert "97%" in row1 and "812.0 MB" in row1 and "55%" in row1
    markup = report_html(snap)
    assert "data: 2 workers (1 running)" in _text_of_html(markup) and ">Input wait</th>" in markup
    assert markup.count("font-weight:600\">55%") == 1, "the input-bound rank's wait stands out"
    gpu = report_text(_with_usage(_snap(2), gpu=True))
    assert "85% · 3.0 GB" in gpu
    over = _with_usage(_snap(2))
    over["data"].update(active=0, running=0)
    assert "data: 2 workers · 1,280 rows in 2.5 s (512 rows/s)" in report_text(over), "the end: totals, mean rate"


def test_a_run_without_usage_or_data_has_no_such_columns():
    text = report_text(_snap(2))
    assert "cpu" not in text.split() and "data:" not in text
    assert ">CPU</th>" not in report_html(_snap(2))


def test_the_state_folds_usage_and_says_when_ranks_are_input_bound():
    from jupyter_torchdist.core import contract as C

    state = RunState(2)
    for rank in (0, 1):
        for at, wait, rows in ((10.0, 0.5, 64), (13.0, 2.4, 128)):
            state.apply(rank, C.RANK, {"t": C.USAGE, "at": at, "cpu_pct": 40.0, "rss": 1 << 30,
                                       "wait_s": wait, "data_s": at - 9.0, "rows": rows}, at)
    state.apply(-1, C.BACKEND, {"t": C.DATA_STATUS, "workers": 1, "active": 1, "running": 1, "rows": 256}, 13.0)
    snap = state.snapshot()
    assert snap["ranks"][0]["usage"]["input_wait"] == pytest.approx(0.6) and snap["data"]["rows"] == 256
    assert snap["data"]["rows_per_s"] == pytest.approx(2 * 64 / 3, rel=0.01)
    assert any("input-bound" in n and "--data-workers 2" in n for n in snap["notices"])
    quiet = RunState(1)
    quiet.apply(0, C.RANK, {"t": C.USAGE, "at": 1.0, "wait_s": 0.1, "data_s": 10.0, "rows": 5}, 1.0)
    assert not any("input-bound" in n for n in quiet.snapshot()["notices"])
