"""The kernel's side of the runs panel, on real run handles, run states and sweeps of this process (no kernel, no
ranks): a run's entry from its snapshot, the publisher's writes (only on change, at most every WRITE_S, a heartbeat),
the requests it takes (stop, report), its last write, and the command line reading what it wrote."""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_torchdist.core.errors import RunInterrupted
from jupyter_torchdist.core.options import parse_options
from jupyter_torchdist.kernel.runs.restarts import ContinuedView
from jupyter_torchdist.kernel.runs.run import Run
from jupyter_torchdist.kernel.runs.driver import RunDriver
from jupyter_torchdist.kernel.state.run import RunState
from jupyter_torchdist.kernel.sweeps.search import make_search
from jupyter_torchdist.kernel.sweeps.sweep import Sweep
from jupyter_torchdist.panel import cli, publisher
from jupyter_torchdist.panel.asks import ask
from jupyter_torchdist.panel.entries import run_entry
from jupyter_torchdist.core.held_folder import read_json, registry_dir
from jupyter_torchdist.panel.registry import HEARTBEAT_S
from jupyter_torchdist.views import NullView


def _state(n: int, step: int, loss: float = 0.5) -> RunState:
    st = RunState(n, title="%%distribute -n 2", backend="spark local[4] (embedded)", started_at=0.0)
    for r in range(n):
        st.apply(r, "rank", {"t": "hello", "host": f"worker-{r // 4}"}, 0.0)
        st.apply(r, "rank", {"t": "state", "state": "running"}, 0.0)
        metrics = {"acc": 0.9, "loss": loss}
        st.apply(r, "rank", {"t": "progress", "step": step + r % 3, "total": 100, "metrics": metrics}, 1.0)
    return st


def _run(number: int, line: str = "-n 2 --background") -> tuple[Run, RunDriver]:
    options = parse_options(line)
    run = Run(number, f"%%distribute {line}", options)
    driver = RunDriver(run, b"", options, None, ContinuedView(NullView()))  # type: ignore[arg-type]
    return run, driver


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A publisher on this process's own run handles (``held``) and a registry of its own."""
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    held: list[Run] = []
    monkeypatch.setattr(publisher, "_kernel_runs", lambda: list(held))
    folder = registry_dir(create=True)
    assert folder is not None
    pub = publisher.Publisher(folder, "0123abcd-aaaa-bbbb-cccc-000000000000", "exp/a.ipynb")
    pub.held = held
    return pub


def test_an_entry_says_rank_0s_progress_the_hosts_and_the_backend() -> None:
    run, driver = _run(3)
    run.running()
    driver.shown.update(dict(_state(8, 40, loss=float("nan")).snapshot()))
    entry = run_entry(run, driver.shown.latest, kernel_id="k", notebook="a.ipynb", cell=None)
    assert (entry["id"], entry["number"], entry["state"], entry["step"], entry["total"]) == (
        run.id, 3, "running", 40, 100)
    assert entry["metric"] == {"name": "loss", "value": "nan"}, "the loss first, and JSON has no NaN"
    assert (entry["backend"], entry["where"], entry["ranks"]) == ("spark", "spark local[4] (embedded)", 8)
    assert (entry["hosts"], entry["host_count"]) == (["worker-0", "worker-1"], 2)
    bare = run_entry(Run(4, "%%distribute -n 2", parse_options("-n 2")), None, kernel_id="k", notebook=None,
                     cell=None)
    assert (bare["state"], bare["step"], bare["backend"], bare["ranks"]) == ("queued", None, None, 2)


def test_a_many_rank_runs_entry_takes_the_median_rank() -> None:
    run, driver = _run(1, "-n 100")
    driver.shown.update(dict(_state(100, 10).snapshot()))
    entry = run_entry(run, driver.shown.latest, kernel_id="k", notebook=None, cell=None)
    assert entry["step"] == 11 and entry["host_count"] == 25 and len(entry["hosts"]) == 8


def test_tracker_links_open_the_trackers_pages_or_name_their_folders(monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``run.tracking`` says (the tracking tests check that it is right), as the panel's links."""
    from types import SimpleNamespace

    from jupyter_torchdist.panel.kernel_runs import tracker_links
    from jupyter_torchdist.tracking import names

    monkeypatch.setattr(names, "tracking_uri", lambda: "http://127.0.0.1:5000/")   # MLflow's, as the kernel sees it
    run = SimpleNamespace(tracking={"mlflow": "abc123", "tensorboard": "/home/u/runs/run1",
                                    "wandb": "https://wandb.ai/u/p/runs/xyz"})
    assert tracker_links(run) == [
        {"kind": "mlflow", "label": "MLflow", "url": "http://127.0.0.1:5000/#/runs/abc123"},
        {"kind": "tensorboard", "label": "TensorBoard", "path": "/home/u/runs/run1"},
        {"kind": "wandb", "label": "W&B", "url": "https://wandb.ai/u/p/runs/xyz"}]
    monkeypatch.setattr(names, "tracking_uri", lambda: "sqlite:///mlflow.db")
    assert tracker_links(SimpleNamespace(tracking={"mlflow": "abc123"})) == [
        {"kind": "mlflow", "label": "MLflow run abc123", "path": "sqlite:///mlflow.db"}]
    assert tracker_links(Run(1, "t", parse_options("-n 2"))) == [], "not tracked: no links"


def test_the_file_is_written_on_change_at_most_every_write_s_and_on_a_heartbeat(kernel: Any) -> None:
    run, driver = _run(1)
    kernel.held.append(run)
    kernel.start()
    try:
        time.sleep(0.1)
    finally:
        kernel._stopped.set()   # the test ticks by hand from here
    kernel._thread.join(5)
    t0, writes = time.time(), kernel.writes
    assert read_json(kernel.file)["entries"][0]["state"] == "queued"
    run.running()
    driver.shown.update(dict(_state(2, 5).snapshot()))
    assert kernel.tick(t0 + 10) and kernel.writes == writes + 1
    driver.shown.update(dict(_state(2, 6).snapshot()))
    assert kernel.tick(t0 + 10.1) and kernel.writes == writes + 1, "within WRITE_S: not yet"
    kernel.tick(t0 + 10.6)
    assert kernel.writes == writes + 2 and read_json(kernel.file)["entries"][0]["step"] == 6
    kernel.tick(t0 + 11.2)
    assert kernel.writes == writes + 2, "nothing changed: nothing written"
    kernel.tick(t0 + 10.6 + HEARTBEAT_S)
    assert kernel.writes == writes + 3 and read_json(kernel.file)["updated"] == t0 + 10.6 + HEARTBEAT_S
    record = read_json(kernel.file)
    assert (record["kernel_id"], record["pid"], record["notebook"], record["ended"]) == (
        kernel.kernel_id, os.getpid(), "exp/a.ipynb", None)
    assert os.stat(kernel.file).st_mode & 0o777 == 0o600


def test_a_stop_request_stops_that_run_only_and_its_report_is_written_as_it_ends(kernel: Any) -> None:
    (one, d1), (two, d2) = _run(1), _run(2)
    kernel.held += [one, two]
    for run, driver in ((one, d1), (two, d2)):
        run.running()
        driver.shown.update(dict(_state(2, 7).snapshot()))
    kernel.write(kernel._entries(kernel.held))
    ask(kernel.folder, kernel.kernel_id, "stop", one.id, by="the runs panel")
    kernel.tick(time.time() + 1)
    assert one.stop_asked == "the runs panel" and two.stop_asked is None
    states = {e["number"]: e["state"] for e in read_json(kernel.file)["entries"]}
    assert states == {1: "stopping", 2: "running"}
    final = _state(2, 8)
    final.status = "interrupted"
    d1.shown.finish(dict(final.snapshot()))
    one.finish(None, None, RunInterrupted("stopped by the runs panel"))
    kernel.tick(time.time() + 2)
    entry = next(e for e in read_json(kernel.file)["entries"] if e["number"] == 1)
    assert entry["state"] == "stopped" and "stopped by the runs panel" in entry["outcome"]
    report = read_json(Path(entry["report"]))
    assert report["mime"] == "application/vnd.jupyter-torchdist.run+json"
    assert report["data"]["status"] == "interrupted" and report["data"]["ranks"][0]["step"] == 8


def test_a_stop_names_a_durable_id_so_a_restarted_kernels_run_1_is_not_an_earlier_run_1(kernel: Any) -> None:
    """Jupyter keeps a kernel's id across restarts and the new process numbers its runs from 1 again: a request for
    the earlier process's run 1 (a stale panel row, an id copied from ``jupyter-torchdist runs``) stops nothing."""
    earlier, _ = _run(1)
    now, driver = _run(1)   # the restarted kernel's run 1
    kernel.held.append(now)
    now.running()
    assert earlier.id != now.id and len({Run(1, "t", parse_options("-n 2")).id for _ in range(1000)}) == 1000
    ask(kernel.folder, kernel.kernel_id, "stop", earlier.id, by="a stale panel")
    kernel.tick(time.time() + 1)
    assert now.stop_asked is None and now.state == "running"
    with pytest.raises(ValueError, match="not a request"):
        ask(kernel.folder, kernel.kernel_id, "stop", "../x", by="anyone")
    ask(kernel.folder, kernel.kernel_id, "stop", now.id, by="the runs panel")
    kernel.tick(time.time() + 2)
    assert now.stop_asked == "the runs panel"


def test_a_running_runs_report_is_written_when_asked_at_most_once_a_second(kernel: Any) -> None:
    run, driver = _run(1)
    kernel.held.append(run)
    run.running()
    driver.shown.update(dict(_state(2, 3).snapshot()))
    path = kernel.reports.path / f"{run.id}.json"
    ask(kernel.folder, kernel.kernel_id, "report", run.id, by="the runs panel")
    kernel.tick()
    first = read_json(path)
    assert first["data"]["ranks"][0]["step"] == 3
    driver.shown.update(dict(_state(2, 4).snapshot()))
    ask(kernel.folder, kernel.kernel_id, "report", run.id, by="the runs panel")
    kernel.tick()
    assert read_json(path)["at"] == first["at"], "asked again within a second: the same report"


def test_a_sweep_is_one_entry_over_its_members_and_stops_as_a_whole(kernel: Any) -> None:
    options = parse_options('-n 2 --sweep "lr=[0.1, 0.2]"')
    sweep = Sweep("%%distribute -n 2 --sweep", options, NullView(), make_search(options.sweep, "grid", None, None,
                                                                                 "min", None))
    for number, lr in ((1, 0.1), (2, 0.2)):
        run = Run(number, sweep.title, options, {"lr": lr})
        run.sweep = sweep
        sweep.runs.append(run)
        kernel.held.append(run)
        run.running()
        sweep.members.update(dict(_state(2, 5, loss=lr).snapshot()) | {"run_id": number})
    entries = kernel._entries(kernel.held)
    head = next(e for e in entries if e["kind"] == "sweep")
    members = [e for e in entries if e["kind"] == "run"]
    assert head["id"] == sweep.id and head["state"] == "running" and head["total"] == 2
    assert [m["sweep"] for m in members] == [head["id"]] * 2 and [m["params"] for m in members] == ["lr=0.1",
                                                                                                  "lr=0.2"]
    assert head["members"] == [m["id"] for m in members]
    ask(kernel.folder, kernel.kernel_id, "stop", sweep.id, by="the runs panel")
    kernel.tick()
    assert all(r.stop_asked for r in sweep.runs)


def test_the_last_write_says_the_kernel_ended_and_the_command_line_lists_it_with_all(
        kernel: Any, capsys: pytest.CaptureFixture[str]) -> None:
    run, driver = _run(1)
    kernel.held.append(run)
    run.finish("v", None, None)
    kernel.start()
    kernel.close()
    record = read_json(kernel.file)
    assert record["ended"] is not None and record["entries"][0]["state"] == "done"
    assert not kernel.inbox.path.exists(), "no request can be left for an ended kernel"
    assert cli.main(["runs"]) == 0 and "no runs in living kernels" in capsys.readouterr().out
    assert cli.main(["runs", "--all", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(e["id"], e["state"], e["kernel"]) for e in listed] == [(run.id, "done", "ended")]
    assert cli.main(["stop", run.id]) == 1 and "already ended" in capsys.readouterr().err


def test_the_command_line_table_and_stop(kernel: Any, capsys: pytest.CaptureFixture[str]) -> None:
    run, driver = _run(7)
    kernel.held.append(run)
    run.running()
    driver.shown.update(dict(_state(2, 42).snapshot()))
    kernel.write(kernel._entries(kernel.held))
    assert cli.main(["runs"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["RUN", "STATE", "NOTEBOOK", "PROGRESS"]
    assert out[1].split()[:4] == [run.id, "running", "exp/a.ipynb", "42/100"] and "loss 0.5" in out[1]
    assert cli.main(["stop", "nope-1"]) == 1 and "no run nope-1" in capsys.readouterr().err
    stopped = threading.Event()

    def kernels_thread() -> None:
        while not stopped.is_set():
            kernel.tick()
            time.sleep(0.05)

    ticking = threading.Thread(target=kernels_thread)
    ticking.start()
    try:
        assert cli.main(["stop", run.id, "--wait", "0"]) == 0
    finally:
        stopped.set()
        ticking.join()
    assert run.stop_asked == "jupyter-torchdist stop" and "asked to stop" in capsys.readouterr().out
    assert cli.main(["runs", "--bogus"]) == 2


def test_old_kernels_files_are_looked_for_at_most_every_ten_minutes(tmp_path: Path, monkeypatch) -> None:
    from jupyter_torchdist.panel import publisher

    calls: list[Path] = []
    monkeypatch.setattr(publisher, "clean", lambda folder: calls.append(folder))
    publisher._clean_quietly(tmp_path)
    publisher._clean_quietly(tmp_path)  # another kernel loading a moment later: the folder was just read
    assert calls == [tmp_path]
    old = time.time() - publisher.CLEAN_EVERY_S - 1
    os.utime(tmp_path / ".cleaned", (old, old))
    publisher._clean_quietly(tmp_path)
    assert calls == [tmp_path, tmp_path]


def test_a_detached_sweeps_row_is_the_detached_one_and_its_members_offer_no_attach(kernel: Any) -> None:
    options = parse_options('-n 1 --local --detach --sweep "lr=[0.1, 0.2]"')
    sweep = Sweep("%%distribute -n 1 --sweep", options, NullView(), make_search(options.sweep, "grid", None, None,
                                                                                "min", None))
    run = Run(1, sweep.title, options.__class__(n=1, local=True, background=True), {"lr": 0.1})  # as start_sweep
    run.sweep = sweep                                                                  # makes members: not detached
    sweep.runs.append(run)
    kernel.held.append(run)
    entries = kernel._entries(kernel.held)
    head = next(e for e in entries if e["kind"] == "sweep")
    member = next(e for e in entries if e["kind"] == "run")
    assert head["detached"] is True and member["detached"] is False  # Attach takes the sweep's id, not a member's
