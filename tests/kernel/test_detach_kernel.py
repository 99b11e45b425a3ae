"""``%%distribute --detach`` in real kernels, as a user meets it: runs (on local processes and on the default embedded
session) and a sweep go on when their kernel is restarted and then killed mid-run; a kernel started afterwards
attaches (``%distribute_attach`` draws the live view, ``jt.attach(ID).result()`` gives the value, a sweep's handle
its rows and best member); the report is saved beside the notebook; a stop from the later kernel ends another
detached run; the runners go with their runs (nothing outlives them)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..support.kernel import Kernel
from ..support.procs import all_gone, descendants_of, process_alive

CELL = """%%distribute -n 2 --local --detach
import os, time, torch, torch.distributed as dist
import jupyter_torchdist as jt
step, end = 0, time.time() + 240
while not os.path.exists({finish!r}) and time.time() < end:   # trains until the test says (not a race)
    step += 1
    jt.report(step=step, loss=1.0 / step)
    time.sleep(0.2)
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
t.item()"""
SWEEP = """%%distribute -n 1 --local --detach --sweep "lr=[0.1, 0.2]"
import os, time
import jupyter_torchdist as jt
end = time.time() + 240
while not os.path.exists({finish!r}) and time.time() < end:   # each member goes on until the test says
    jt.report(step=1, loss=lr)
    time.sleep(0.2)
jt.report(step=2, loss=lr)
lr * 10"""
FOREVER = """%%distribute -n 2 --local --detach
import time
while True:
    time.sleep(0.1)"""


def _kernel(tmp_path: Path, folder: str, notebook: str | None = None) -> Kernel:
    cwd = tmp_path / folder
    cwd.mkdir()
    env: dict[str, str | None] = {"JUPYTER_TORCHDIST_WARMUP": "0", "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
                                  "JPY_SESSION_NAME": notebook}
    k = Kernel(env, cwd=str(cwd))
    k.ok("%load_ext jupyter_torchdist")
    return k


def _handed(kernel: Kernel, cell: str, name: str) -> str:
    """Run a --detach cell; its handle kept as ``name``; the run's id."""
    shown = kernel.ok(cell)
    found = re.search(r"<DetachedRun \(([0-9a-f]{12})\)", shown)
    assert found, shown
    kernel.ok(f"{name} = _")
    return found.group(1)


def _runner_pid(tmp_path: Path, run_id: str) -> int:
    said = tmp_path / "runtime" / "jupyter-torchdist-detached" / run_id / "runner.json"
    end = time.monotonic() + 60
    while not said.exists() and time.monotonic() < end:
        time.sleep(0.1)
    return int(json.loads(said.read_text())["pid"])


def _assert_tensorboard_record(runs: Path) -> None:
    """``--track tensorboard`` of a run whose kernel died: its runner wrote the steps and the HParams session's end."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folders = [p for p in runs.iterdir() if p.is_dir()] if runs.exists() else []
    assert len(folders) == 1, f"one run's folder under {runs}: {folders}"
    events = EventAccumulator(str(folders[0]))
    events.Reload()
    assert len(events.Scalars("loss")) >= 2, "the steps rank 0 reported, recorded"
    assert "_hparams_/session_end_info" in events.PluginTagToContent("hparams"), "the run's end, recorded"


def _listed_step(tmp_path: Path, run_id: str) -> float:
    """The run's step as ``jupyter-torchdist runs --json`` lists it (the runs panel's API, from a terminal)."""
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    out = subprocess.run([sys.executable, "-m", "jupyter_torchdist", "runs", "--json"], env=env, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    entries = {e.get("id"): e for e in json.loads(out)}
    assert run_id in entries, f"{run_id} is not listed: {out}"
    return float(entries[run_id].get("step") or 0)


@pytest.mark.timeout(300)
def test_a_detached_run_trains_on_after_its_kernel_is_killed_and_a_later_kernel_attaches(tmp_path: Path):
    first = _kernel(tmp_path, "notebook", notebook="train.ipynb")
    try:
        finish = tmp_path / "finish"
        tracked = CELL.replace("--detach", "--detach --track tensorboard")   # its runner keeps the record
        run_id = _handed(first, tracked.format(finish=str(finish)), "local_run")   # local processes of its runner
        spark_id = _handed(first, CELL.replace(" --local", "").format(finish=str(finish)), "spark_run")  # the default:
        runner, sparker = _runner_pid(tmp_path, run_id), _runner_pid(tmp_path, spark_id)  # its runner's own session
        training = first.ok("import time\nend = time.time() + 150\nwhile time.time() < end and not all(any(x.get("
                            "'step') for x in (r.frame or {}).get('ranks', [])) for r in (local_run, spark_run)):\n"
                            "    time.sleep(0.1)\nprint(local_run.state, spark_run.state)", timeout=180)
        assert training == "running running", training
        spark_family = descendants_of(sparker) | {sparker}   # its JVM, Spark's Python workers, the ranks
        assert len(spark_family) > 3, spark_family
        swept = first.ok(SWEEP.format(finish=str(finish)))   # a whole sweep goes on without its kernel too
        found = re.search(r"<DetachedSweep \(([0-9a-f]{12})\)", swept)
        assert found, swept
        sweep_id = found.group(1)
        sweeper = _runner_pid(tmp_path, sweep_id)
        first.km.restart_kernel(now=False)   # as Kernel > Restart does: the kernel shuts down, a new one starts
        first.kc.wait_for_ready(timeout=60)
        assert all(map(process_alive, (runner, sparker, sweeper))), "a runner went with its kernel's restart"
        assert first.ok(f"import jupyter_torchdist as jt\nprint(jt.attach('{run_id}').state)") == "running"
    finally:
        first.shutdown()   # then a crash: SIGKILL to the kernel's whole process group
    assert all(map(process_alive, (runner, sparker, sweeper))), "a runner went with its kernel"
    first_step = _listed_step(tmp_path, run_id)   # no kernel now: the run goes on stepping, as the runs list shows
    end = time.monotonic() + 30
    while _listed_step(tmp_path, run_id) <= first_step and time.monotonic() < end:
        time.sleep(0.5)
    assert _listed_step(tmp_path, run_id) > first_step, "the step `jupyter-torchdist runs --json` shows stood still"

    later = _kernel(tmp_path, "elsewhere")
    try:
        r = later.execute(f"%distribute_attach {run_id}")
        assert r["status"] == "ok", later.text(r)
        assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in r["outputs"]), \
            f"the attached cell draws the live view: {r['outputs']}"
        assert f"<DetachedRun ({run_id})" in later.text(r)
        finish.touch()   # the run may end now
        value = later.ok(f"import jupyter_torchdist as jt\nrun = jt.attach('{run_id}')\nprint(run.result(timeout=150),"
                         " run.state)", timeout=180)
        assert value == "3.0 done", value
        value = later.ok(f"print(jt.attach('{spark_id}').result(timeout=150))", timeout=180)
        assert value == "3.0", value
        assert all_gone(spark_family, 30.0), "the embedded session's processes outlived their detached run"
        listed = later.ok("print([(h.id, h.state) for h in jt.runs(detached=True)])")
        assert f"('{run_id}', 'done')" in listed, listed
        assert all_gone({runner}, 30.0), "the runner outlived its run"
        report = tmp_path / "notebook" / f"train.run-{run_id}.html"
        assert report.exists() and "succeeded" in report.read_text().lower(), "the report is saved beside the notebook"
        _assert_tensorboard_record(tmp_path / "notebook" / "runs")
        swept = later.ok(f"s = jt.attach('{sweep_id}')\ns.wait(150)\nprint(type(s).__name__, s.state, sorted((r['lr'], "
                         "r['state'], r['value']) for r in s.rows()), s.best()['lr'])", timeout=180)
        assert swept == "DetachedSweep done [(0.1, 'done', 1.0), (0.2, 'done', 2.0)] 0.1", swept
        assert all_gone({sweeper}, 30.0), "the sweep's runner outlived it"
        r = later.execute(f"%distribute_attach {sweep_id}")
        assert r["status"] == "ok" and f"<DetachedSweep ({sweep_id})" in later.text(r), later.text(r)
        assert any("application/vnd.jupyter-torchdist.sweep+json" in o.get("data", {}) for o in r["outputs"]), \
            f"an ended sweep's attached cell draws its comparison: {r['outputs']}"
        assert (tmp_path / "notebook" / f"train.run-{sweep_id}.html").exists(), "the sweep's comparison is saved"

        # a stop from this kernel ends another detached run (its runner stops its ranks, then goes)
        shown = later.ok(FOREVER)
        second = re.search(r"<DetachedRun \(([0-9a-f]{12})\)", shown).group(1)  # type: ignore[union-attr]
        pid = _runner_pid(tmp_path, second)
        stopped = later.ok("import time\nh = _\nend = time.time() + 120\nwhile h.state != 'running' and time.time() < "
                           "end:\n    time.sleep(0.1)\nprint(h.stop())\nh.wait(60)\nprint(h.state, type(h.error)."
                           "__name__)", timeout=180)
        assert stopped.splitlines() == ["True", "stopped RunInterrupted"], stopped
        assert all_gone({pid}, 30.0), "the stopped run's runner outlived it"
    finally:
        later.shutdown()
