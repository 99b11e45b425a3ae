"""--profile's window on a rank: torch.profiler runs for exactly the steps asked (the real profiler, in process), and a
window cut short, never reached or too large to send says so; the supervisor survives a recorder that fails."""
from __future__ import annotations

import gzip
import json
from types import SimpleNamespace

import pytest
import torch

from jupyter_torchdist.core import contract as C
from jupyter_torchdist.core.track_options import AUTO_WINDOW
from jupyter_torchdist.rank import profiler as P


def _loop(prof: P.StepProfiler, steps: int) -> None:
    x = torch.randn(32, 32)
    for step in range(steps):
        x = torch.tanh(x @ x)
        prof.on_report(step)


def test_the_window_profiles_exactly_its_steps_and_sends_one_trace():
    sent: list = []
    prof = P.StepProfiler((2, 5), False, sent.append)
    _loop(prof, 8)
    prof.close()
    [msg] = sent
    assert msg["t"] == C.PROFILE and (msg["first"], msg["last"], msg["shares"]["steps"]) == (2, 4, 3)
    assert msg["note"] is None and msg["shares"]["compute"] > 0
    names = {e.get("name", "") for e in json.loads(gzip.decompress(msg["trace"]))["traceEvents"]}
    assert any(n.startswith("ProfilerStep#") for n in names) and "aten::tanh" in names
    assert not P._Window.open


def test_the_profiler_warms_up_on_the_step_before_the_window_and_keeps_only_the_window():
    sent: list = []
    prof = P.StepProfiler((3, 5), False, sent.append)
    x = torch.randn(16, 16)
    for step in range(6):
        with torch.profiler.record_function(f"mine{step}"):
            x = torch.tanh(x @ x)
        prof.on_report(step)
        warming = prof.prof is not None and not prof.recording
        assert warming == (step == 1), step   # the report of step START-2 starts it, nothing kept yet
    [msg] = sent
    names = {e.get("name", "") for e in json.loads(gzip.decompress(msg["trace"]))["traceEvents"]}
    assert {n for n in names if n.startswith("mine")} == {"mine3", "mine4"}   # the warm-up step is not kept
    assert (msg["first"], msg["last"], msg["shares"]["steps"]) == (3, 4, 2)


def test_a_warm_up_whose_window_never_comes_keeps_nothing():
    sent: list = []
    prof = P.StepProfiler((5, 8), False, sent.append)
    _loop(prof, 4)   # steps 0-3: warms up at step 3, the cell ends
    assert prof.prof is not None and not prof.recording
    prof.close()
    assert [m["note"] for m in sent] == ["nothing profiled: the cell ended after 4 report() calls, before step 5"]
    assert prof.prof is None and not P._Window.open


def test_alone_it_profiles_three_steps_from_the_second_report():
    sent: list = []
    prof = P.StepProfiler(AUTO_WINDOW, False, sent.append)
    _loop(prof, 10)
    assert (sent[0]["first"], sent[0]["last"], sent[0]["shares"]["steps"]) == (2, 4, 3)


@pytest.mark.parametrize("window, steps, note", [
    ((2, 50), 5, "the cell ended at step 4 before the window's end"),
    ((20, 30), 3, "nothing profiled: the cell ended after 3 report() calls, before step 20"),
])
def test_a_window_cut_short_or_never_reached_says_so(window, steps, note):
    sent: list = []
    prof = P.StepProfiler(window, False, sent.append)
    _loop(prof, steps)
    prof.close()
    assert [m["note"] for m in sent] == [note]


def test_a_trace_over_the_frame_limit_is_not_sent_and_the_note_says_why():
    sent: list = []
    prof = P.StepProfiler((1, 3), False, sent.append, max_bytes=10)
    _loop(prof, 4)
    assert sent[0]["trace"] is None and "too large to send" in sent[0]["note"] and sent[0]["shares"]["steps"] == 2


def test_a_recorder_that_fails_is_said_once_and_never_costs_the_run():
    from jupyter_torchdist.kernel.runs.supervisor import Supervisor

    def broken(_ev):
        raise OSError("disk full")

    sup = SimpleNamespace(tap=broken, state=SimpleNamespace(notes=[]))
    Supervisor._record(sup, SimpleNamespace(rank=0, msg={"t": C.PROGRESS}))
    assert sup.tap is None and sup.state.notes == ["warning: the run's record stopped: OSError: disk full"]


def test_a_profiler_that_cannot_start_is_said_and_the_cell_goes_on(monkeypatch):
    import torch.profiler

    def broken(*_a, **_k):
        raise RuntimeError("profiler already enabled on this thread")

    monkeypatch.setattr(torch.profiler, "profile", broken)
    sent: list = []
    prof = P.StepProfiler((2, 4), False, sent.append)
    _loop(prof, 6)   # report() never raises for it
    prof.close()
    assert [m["note"] for m in sent] == ["the profiler failed: RuntimeError: profiler already enabled on this thread"]
    assert not P._Window.open
