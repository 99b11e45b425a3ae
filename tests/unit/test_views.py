"""Unit: views draw snapshots; one schema, one trimming pipeline, one colour map for every renderer."""
from __future__ import annotations

import io
import re
from pathlib import Path

from jupyter_torchdist.kernel.state.run import RunState
from jupyter_torchdist.views import chart, style
from jupyter_torchdist.views.report_html import report_html
from jupyter_torchdist.views.report_text import report_text
from jupyter_torchdist.views.schema import (LOSS_KEYS, FrameSnapshot, GroupSnapshot, HostGroupSnapshot,
                                            OutlierSnapshot, PlaceSnapshot, QuantileSnapshot, RankSnapshot,
                                            RunErrorSnapshot, RunSnapshot, SecondarySnapshot, SummarySnapshot,
                                            SweepRunSnapshot, SweepSnapshot, TableSnapshot, ProfileSnapshot,
                                            ProfileRankSnapshot)
from jupyter_torchdist.views.text import TextView

ROOT = Path(__file__).resolve().parents[2]
TS = ROOT / "labextension" / "src"
CSS = ROOT / "labextension" / "style" / "base.css"


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


def test_the_dropped_notice_reaches_the_text_and_html_report():
    st = _state()
    st.apply(1, "rank", {"t": "dropped", "log_lines": 12345, "log_bytes": 1, "progress": 0}, 1.0)
    notice = "rank 1: 12,345 log lines past the budget were dropped"
    assert f"note: {notice}" in report_text(st.snapshot())
    assert notice in report_html(st.snapshot())


# -- one schema: the Python TypedDicts and labextension/src/types.ts name the same fields -------------
def _ts_fields(interface: str) -> set[str]:
    text = (TS / "types.ts").read_text()
    body = re.search(r"export interface " + interface + r" \{(.*?)\n\}", text, re.S)
    assert body, f"{interface} not in types.ts"
    return set(re.findall(r"^\s+(\w+)\?:", body.group(1), re.M))


def test_the_front_end_types_mirror_the_snapshot_schema():
    pairs = {"IRunSnapshot": RunSnapshot, "IRankSnapshot": RankSnapshot, "IRunError": RunErrorSnapshot,
             "ISecondaryError": SecondarySnapshot, "IPlace": PlaceSnapshot, "IFrame": FrameSnapshot,
             "ISweepSnapshot": SweepSnapshot, "ISweepRun": SweepRunSnapshot,
             "IQuantile": QuantileSnapshot, "IHostGroup": HostGroupSnapshot, "IOutlier": OutlierSnapshot,
             "IGroup": GroupSnapshot, "ISummary": SummarySnapshot, "ITable": TableSnapshot,
             "IProfile": ProfileSnapshot, "IProfileRank": ProfileRankSnapshot}
    for ts_name, py in pairs.items():
        assert _ts_fields(ts_name) == set(py.__annotations__), ts_name


# -- one colour map, one loss-key list, one palette ----------------------------------------------------
def _css_roles() -> dict[str, str]:
    return dict(re.findall(r"--td-(\w+): var\(--jp-[\w-]+, (#[0-9a-f]{6})\)", CSS.read_text()))


def _css_state_roles() -> dict[str, str]:
    """{state or status: role} from rules like `.jp-TorchDist-status-failed { background: var(--td-bad); }`."""
    out = {}
    for selectors, role in re.findall(r"((?:\.jp-TorchDist[\w.-]*-(?:state|status)-\w+,?\s*)+)\{\s*"
                                      r"background: var\(--td-(\w+)\)", CSS.read_text()):
        for name in re.findall(r"-(?:state|status)-(\w+)", selectors):
            out[name] = role
    return out


def test_python_colours_are_the_front_ends():
    css = _css_roles()
    for role, hex_colour in style.ROLE_COLOURS.items():
        assert css[role] == hex_colour, role
    for name, role in _css_state_roles().items():
        assert style.STATE_ROLES[name] == role, f"{name}: css says {role}, python {style.STATE_ROLES[name]}"


def test_loss_keys_and_palette_are_the_front_ends():
    render = "".join(p.read_text() for p in sorted(TS.glob("*.ts")))
    assert re.search(r"LOSS_KEYS = \[([^\]]*)\]", render).group(1).replace("'", '"').split(", ") == \
        [f'"{k}"' for k in LOSS_KEYS]
    palette = re.search(r"PALETTE = \[([^\]]*)\]", render, re.S).group(1)
    assert re.findall(r"#[0-9a-f]{6}", palette) == list(chart.PALETTE)
