"""Unit: a many-rank run (issue 35) as the views get it: summary, outliers, compact table, featured ranks, grouped
echoes and places, the report's byte budget at 4,096 ranks, the rank's pacing and the live view's byte budget."""
from __future__ import annotations

import json

from jupyter_torchdist.core.errors import RankFailure, RunFailed
from jupyter_torchdist.kernel.state.places import grouped_where_lines
from jupyter_torchdist.kernel.state.run import RunState
from jupyter_torchdist.kernel.state.many_ranks import is_many
from jupyter_torchdist.rank.client import BATCH_INTERVAL_S, MAX_INTERVAL_S, PROGRESS_PER_BATCH, pace
from jupyter_torchdist.views.live import TABLE_MIN_S, LiveView
from jupyter_torchdist.views.report import report_bundle
from jupyter_torchdist.views.schema import MANY_RANKS
from jupyter_torchdist.views.trim import REPORT, trim_snapshot


def _run(n: int, hosts: int = 8, lines: int = 0) -> RunState:
    """``n`` ranks on ``hosts`` hosts, at step 50 of 100 but rank 7 (step 10) and rank 9 (slow); rank 3 failed."""
    st = RunState(n, title=f"%%distribute -n {n}", backend="simulated", started_at=0.0)
    for r in range(n):
        st.apply(r, "rank", {"t": "hello", "host": f"h{r * hosts // n:02d}"}, 0.1)
        st.apply(r, "rank", {"t": "state", "state": "running"}, 0.2)
        last = 10 if r == 7 else 50
        for step in (1, last // 2, last):
            at = 1.0 + step * (0.5 if r == 9 else 0.1)
            st.apply(r, "rank", {"t": "progress", "step": step, "total": 100, "at": at,
                                 "metrics": {"loss": 1.0 / step + r * 1e-4, "acc": 0.5}}, at)
        for i in range(lines):
            st.apply(r, "rank", {"t": "log", "stream": "stdout", "text": f"rank {r} line {i} " + "x" * 200}, 5.0)
    st.apply(3, "rank", {"t": "failed", "summary": "ValueError: nan loss", "traceback": "Traceback...\n"}, 6.0)
    st.now = 8.0
    return st


def test_a_run_past_the_threshold_is_summarised_and_only_featured_ranks_keep_a_row():
    assert not is_many(MANY_RANKS) and is_many(MANY_RANKS + 1)
    snap = _run(256).snapshot(focus=[200])
    summary, table = snap["summary"], snap["table"]
    assert summary is not None and table is not None
    assert summary["counts"] == {"running": 255, "failed": 1}
    steps = next(q for q in summary["quantiles"] if q["name"] == "step")
    assert steps["q"] == [10.0, 50.0, 50.0, 50.0, 50.0] and steps["n"] == 256
    assert [q["name"] for q in summary["quantiles"]][:2] == ["step", "rate"] and "loss" in {
        q["name"] for q in summary["quantiles"]}
    why = {o["rank"]: o["why"] for o in summary["outliers"]}
    assert why[3] == "failed" and why[7] == "behind" and why[9] == "slowest", summary["outliers"]
    assert [h["host"] for h in summary["hosts"]] == [f"h{i:02d}" for i in range(8)]
    assert summary["hosts"][0]["ranks"] == 32 and summary["hosts"][0]["step"] == 50.0
    assert {r["rank"] for r in snap["ranks"]} == {3, 7, 9, 200}, "failed, outliers and the asked-for rank"
    assert len(table["rows"]) == 256 and table["columns"] == ["rank", "host", "state", "step", "rate", "loss"]
    row = table["rows"][7]
    assert row[0] == 7 and table["hosts"][row[1]] == "h00" and table["states"][row[2]] == "running" and row[3] == 10


def test_a_small_run_keeps_todays_snapshot():
    snap = _run(MANY_RANKS).snapshot()
    assert snap["summary"] is None and snap["table"] is None and len(snap["ranks"]) == MANY_RANKS


def test_the_loss_band_follows_the_median_step_over_the_run():
    st = _run(128)
    st.snapshot()
    for r in range(128):
        st.apply(r, "rank", {"t": "progress", "step": 60, "metrics": {"loss": 0.01 * (1 + r % 3)}}, 7.0)
    band = st.snapshot()["summary"]["loss_band"]
    assert [p[0] for p in band] == [50.0, 60.0]
    assert band[-1][1:] == [0.01, 0.02, 0.03], "min, median, max of the ranks' latest loss"


def test_the_report_of_4096_ranks_with_logs_stays_within_300_kb():
    st = _run(4096, hosts=512, lines=60)
    for r in range(100, 4096):  # the peers' echoes of rank 3's failure
        st.apply(r, "rank", {"t": "failed", "summary": f"RuntimeError: Connection closed by peer 127.0.0.1:{r}",
                             "traceback": "", "secondary": True}, 6.5)
    bundle = report_bundle(st.snapshot(log_tail=REPORT.log_lines))
    size = len(json.dumps(bundle))
    assert size <= 300_000, size
    report = trim_snapshot(st.snapshot())
    assert len(report["table"]["rows"]) == 4096, "every rank is in the report's table"
    echoes = report["error"]["echoes"]
    assert echoes[0]["ranks"] == 3996 and echoes[0]["sample"] == [100, 101, 102, 103, 104], echoes
    assert len(report["error"]["secondary"]) == 16, "the first few one by one, the rest grouped"
    page, text = bundle["text/html"], bundle["text/plain"]
    assert "Ranks worth a look" in page and "3,996 ranks</strong> (100, 101, 102, 103, 104, ...)" in page
    assert "ranks: 99 running, 3,997 failed" in text and "also failed: 3,996 ranks (100, 101" in text


def test_a_thousand_echoes_of_one_failure_are_one_line_of_the_error():
    failures = {0: RankFailure(0, "h0", "exception", "ValueError: nan loss", "Traceback...", 1.0)}
    failures |= {r: RankFailure(r, f"h{r}", "exception", f"RuntimeError: peer {r} closed", "", 2.0, True)
                 for r in range(1, 1024)}
    text = "\n".join(RunFailed("rank 0 failed first", failures, 1024)._render_traceback_())
    assert "  1,023 ranks (1, 2, 3, 4, 5, ...): RuntimeError: peer 1 closed" in text
    assert text.count("RuntimeError: peer") == 1


def test_where_many_ranks_were_is_grouped_by_place():
    st = _run(128)
    for r in range(128):
        computing = r % 4 == 3
        st.apply(r, "rank", {"t": "place", "at": 7.0, "collective": None if computing else "all_reduce",
                             "waited_s": None if computing else 2.0,
                             "frames": [{"where": "cell line 3" if computing else "cell line 5", "name": "<module>",
                                         "code": "step()" if computing else "dist.all_reduce(t)",
                                         "call": "" if computing else "dist.all_reduce", "library": 0}]}, 7.0)
    lines = grouped_where_lines(st.ranks)
    assert lines[0].startswith("  96 ranks (0, 1, 2, 4, 5, ...): waiting in all_reduce at cell line 5"), lines
    assert lines[1] == "      cell line 5: dist.all_reduce(t)", "one rank's frames for its group"
    assert "  31 ranks (7, 11, 15, 19, 23, ...): running at cell line 3" in lines
    assert "  1 rank (3): failed (see its error)" in lines
    places = st.snapshot()["summary"]["places"]
    assert [(p["ranks"], p["sample"][0]) for p in places] == [(96, 0), (31, 7), (1, 3)]


def test_ranks_batch_less_often_as_the_world_grows():
    assert pace(8) == (BATCH_INTERVAL_S, PROGRESS_PER_BATCH)
    interval, keep = pace(1024)
    assert interval == MAX_INTERVAL_S and keep == 2
    assert 1024 / pace(1024)[0] <= 1024 / pace(256)[0] * 2, "the kernel's batches a second stay about flat"


class _Widget:
    """What LiveView sets on its widget."""

    def __init__(self) -> None:
        self.snapshot: dict = {}
        self.table: dict = {}
        self.focus: list[int] = []
        self.sent: list[str] = []

    def __setattr__(self, name: str, value: object) -> None:
        if name in ("snapshot", "table") and hasattr(self, "sent"):
            self.sent.append(name)
        object.__setattr__(self, name, value)


def test_the_live_view_paces_itself_by_bytes_and_sends_the_table_less_often():
    st = _run(1024)
    view = LiveView()
    view.widget = _Widget()  # type: ignore[assignment]
    hold = view.update(st.snapshot())
    assert view.widget.sent == ["snapshot", "table"] and view.widget.snapshot["table"] is None
    assert hold is None or hold < 1.0
    st.apply(0, "rank", {"t": "progress", "step": 51, "metrics": {"loss": 0.5}}, 7.5)
    hold = view.update(st.snapshot())
    assert view.widget.sent[-1] == "snapshot", "the table waits for its turn"
    assert hold is not None and 0 < hold <= TABLE_MIN_S, "and the supervisor comes back for it"
    view.widget.focus = [5]
    assert view.focus == {5}


def test_the_report_of_64_ranks_drawn_one_by_one_stays_within_300_kb():
    st = RunState(64, title="%%distribute -n 64", backend="simulated", started_at=0.0)
    for r in range(64):
        st.apply(r, "rank", {"t": "hello", "host": f"sim-{r // 8:03d}"}, 0.1)
        st.apply(r, "rank", {"t": "state", "state": "running"}, 0.2)
        for step in range(1, 101):
            st.apply(r, "rank", {"t": "progress", "step": step, "total": 100, "at": step / 10,
                                 "metrics": {"loss": 0.123456 / step}}, step / 10)
            if step % 10 == 0:
                st.apply(r, "rank", {"t": "log", "stream": "stdout", "text": f"step {step}: loss 0.1234"}, step / 10)
    st.now = 12.0
    bundle = report_bundle(st.snapshot(log_tail=REPORT.log_lines))
    assert sum(len(json.dumps(v)) for v in bundle.values()) <= 300_000
    report = trim_snapshot(st.snapshot())
    assert report["summary"] is None and len(report["ranks"]) == 64
    assert all(len(r["loss_history"]) == 50 and len(r["log_tail"]) == 10 for r in report["ranks"]), \
        "every rank keeps its curve (thinned) and its log"
