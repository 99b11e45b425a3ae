"""Real ranks (``--local`` and the embedded Spark session): where each rank was when ``--timeout`` stopped a
rank-divergent collective, the stall said by the terminal view while the run goes on, and no process left."""
from __future__ import annotations

import inspect
import io
import sys
import time

import cloudpickle
import pytest

from jupyter_torchdist.core.errors import RunTimeout
from jupyter_torchdist.kernel.runs.driver import Work, launch
from jupyter_torchdist.core.options import RunOptions
from jupyter_torchdist.views.text import TextView

from ..support.procs import all_gone

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the rank functions below travel by value


def diverge(sleep_s: float = 120.0) -> float:
    """Rank 0 waits in all_reduce for a peer that sleeps instead: the classic hang."""
    import time

    import torch
    import torch.distributed as dist

    t = torch.ones(1)
    print("entering", flush=True)
    if dist.get_rank() == 0:
        dist.all_reduce(t)
    else:
        time.sleep(sleep_s)
    return t.item()


def _line(text: str) -> int:
    lines, first = inspect.getsourcelines(diverge)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_timeout_says_where_each_rank_was_in_the_code_s_own_lines(backend):
    options = RunOptions(n=2, local=backend == "local", timeout=9.0, quiet=True)
    t0 = time.monotonic()
    with pytest.raises(RunTimeout) as info:
        launch(Work(diverge), options)
    assert time.monotonic() - t0 < 9.0 + 12, "the timeout stopped it (within the stop's graces)"
    text = "\n".join(info.value._render_traceback_())
    here = "test_debug_runs.py line"
    assert f"rank 0: waiting in all_reduce at {here} {_line('dist.all_reduce')} for " in text, text
    assert f"rank 1: in time.sleep at {here} {_line('time.sleep(sleep_s)')}" in text, text
    snap = info.value.result.state.snapshot()
    assert snap["ranks"][0]["place"]["frames"][-1]["library"] > 0, "torch's own frames are folded"
    assert all_gone([r.pid for r in info.value.result.state.ranks]), "no rank process outlived the run"


class _Timed(io.StringIO):
    """What the terminal view printed, and when each line came."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        self.lines += [(time.monotonic(), line) for line in text.splitlines() if line]
        return super().write(text)

    def first(self, part: str) -> float:
        return next(at for at, line in self.lines if part in line)


def test_a_stall_is_said_within_the_threshold_and_the_run_goes_on():
    out = _Timed()
    with pytest.raises(RunTimeout) as info:
        launch(Work(diverge), RunOptions(n=2, local=True, timeout=14.0, stall_after=4.0), TextView(out))
    entered = out.first("[rank 0] entering")  # printed at the next frame (0.1 s) after it came
    said = out.first("stalled: no rank has made progress")
    text = out.getvalue()
    assert 3.5 <= said - entered <= 4.0 + 3.0, f"said {said - entered:.1f} s after the hang began:\n{text}"
    assert "rank 0: waiting in all_reduce at test_debug_runs.py line" in text
    assert out.first("timed out after 14 s") > said + 5, "the stall notice did not stop the run"
    assert all_gone([r.pid for r in info.value.result.state.ranks])


SCRIPT = """\
import time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1)
if dist.get_rank() == 0:
    dist.all_reduce(t)
else:
    time.sleep(120)
"""


def test_a_scripts_ranks_say_where_they_were_by_file_and_line(tmp_path):
    from jupyter_torchdist.kernel.script_source import script_function

    (tmp_path / "train.py").write_text(SCRIPT)
    work = Work(script_function([str(tmp_path / "train.py")]), title="script train.py", filename="<script>")
    with pytest.raises(RunTimeout) as info:
        launch(work, RunOptions(n=2, local=True, timeout=12.0, quiet=True, script=(str(tmp_path / "train.py"),)))
    text = "\n".join(info.value._render_traceback_())
    assert "rank 0: waiting in all_reduce at train.py line 8 for " in text, text
    assert "rank 1: in time.sleep at train.py line 10" in text and "train.py line 10: time.sleep(120)" in text
