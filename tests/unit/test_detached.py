"""Unit: detached runs' options, where they may run, their folder, and who their runner answers (detached/)."""
from __future__ import annotations

import os
import pickle
import socket
import subprocess
import time
from types import SimpleNamespace

import pytest

from jupyter_torchdist.core.errors import OptionsError, RunError
from jupyter_torchdist.core.options import CLI_PROG, RunOptions, parse_argv, parse_options
from jupyter_torchdist.kernel.detached import client, store
from jupyter_torchdist.launchers import detach_target
from jupyter_torchdist.launchers.session import notebook


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    return tmp_path / "runtime" / store.FOLDER_NAME


def test_detach_is_a_background_run_or_sweep_and_a_notebooks_only():
    options = parse_options("-n 2 --local --detach")
    assert options.detach and options.background and options.summary()["detach"] is True
    with pytest.raises(OptionsError, match="--keep"):
        parse_options("--detach --keep")
    swept = parse_options('-n 1 --local --detach --sweep "lr=[0.1, 0.2]"')   # a whole sweep goes on without its kernel
    assert swept.detach and swept.background and swept.sweep
    with pytest.raises(OptionsError, match="--background"):
        RunOptions(detach=True)   # the API's detach=True says background=True too (notebook_api.run)
    with pytest.raises(OptionsError) as refused:
        parse_argv(["--detach", "train.py"], CLI_PROG)
    assert str(refused.value).startswith("--detach give"), "the command line names what was given, not --background"


def test_a_run_whose_spark_driver_is_the_kernel_is_refused_naming_spark_connect(monkeypatch):
    local, default = RunOptions(local=True, background=True, detach=True), RunOptions(background=True, detach=True)
    monkeypatch.setattr(notebook, "connect_session", lambda: None)
    monkeypatch.setattr(notebook, "own_classic_session", lambda: None)
    assert detach_target(default) is None   # the embedded default: the runner starts its own
    monkeypatch.setattr(notebook, "own_classic_session", lambda: object())
    assert detach_target(local) is None     # --local never touches the notebook's session
    with pytest.raises(OptionsError, match=r"Spark Connect session \(SparkSession.builder.remote"):
        detach_target(default)
    url = SimpleNamespace(geturl=lambda: "http://spark.example:15002/;user_id=me")   # as pyspark keeps it parsed
    monkeypatch.setattr(notebook, "connect_session",
                        lambda: SimpleNamespace(client=SimpleNamespace(_builder=SimpleNamespace(url=url))))
    assert detach_target(default) == "sc://spark.example:15002/;user_id=me"   # its runner connects there


def test_ids_are_the_handles_durable_ids_and_nothing_else():
    assert store.check_id(" 0123456789AB ") == "0123456789ab"
    for bad in ("../etc", "0123456789a", "0123456789abc", 12, None, "0123456789a/"):
        with pytest.raises(ValueError, match="12 hex digits"):
            store.check_id(bad)
    with pytest.raises(ValueError):
        client.attach("not an id")


def test_ended_runs_are_kept_seven_days_and_a_dead_runners_folder_a_day(runtime):
    top = store.held(create=True)
    assert top is not None and oct(os.stat(runtime).st_mode & 0o777) == "0o700"
    now = time.time()
    with top:
        for run_id, outcome_age, runner_pid in (("aaaaaaaaaaaa", 8 * 86400, None), ("bbbbbbbbbbbb", 6 * 86400, None),
                                                ("cccccccccccc", None, 2**22 - 1), ("dddddddddddd", None, os.getpid())):
            with store.run_folder(top, run_id, create=True) as folder:
                folder.write_bytes("spec.pkl", b"x")
                if runner_pid is not None:
                    folder.write("runner.json", {"pid": runner_pid})
                if outcome_age is not None:
                    folder.write_bytes("outcome.pkl", b"x")
                    os.utime(runtime / run_id / "outcome.pkl", (now - outcome_age, now - outcome_age))
                os.utime(runtime / run_id / "spec.pkl", (now - 2 * 86400, now - 2 * 86400))
        store.clean(top, now)
        assert sorted(store.ids(top)) == ["bbbbbbbbbbbb", "dddddddddddd"]


def test_a_runner_gone_without_an_outcome_ends_its_handle_lost_naming_its_log(runtime):
    top = store.held(create=True)
    assert top is not None
    with top, store.run_folder(top, "eeeeeeeeeeee", create=True) as folder:
        folder.write_bytes("spec.pkl", b"x")
        folder.write("runner.json", {"pid": 2**22 - 1, "started": time.time()})
    handle = client.attach("eeeeeeeeeeee")
    assert handle.wait(10) and handle.state == "lost"
    with pytest.raises(RunError, match="runner ended without saying how the run ended.*runner.log"):
        handle.result()


def test_an_outcome_gives_the_value_or_raises_the_runs_own_error(runtime):
    import cloudpickle

    from jupyter_torchdist.core.errors import RunTimeout

    top = store.held(create=True)
    assert top is not None
    with top:
        for run_id, outcome in (("111111111111", {"state": "done", "value": cloudpickle.dumps({"w": [1.0]})}),
                                ("222222222222", {"state": "failed", "error": cloudpickle.dumps(
                                    RunTimeout("--timeout 5 passed: every rank was stopped"))})):
            with store.run_folder(top, run_id, create=True) as folder:
                folder.write_bytes("spec.pkl", b"x")
                folder.write_bytes("outcome.pkl", pickle.dumps({"format": 1, "title": "t", "frame": None, **outcome}))
    assert client.attach("111111111111").result(5) == {"w": [1.0]}
    failed = client.attach("222222222222")
    with pytest.raises(RunTimeout, match="--timeout 5 passed"):
        failed.result(5)
    assert failed.state == "failed" and [h.id for h in client.detached_runs()] == ["111111111111", "222222222222"]


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="needs root, to connect as another user")
def test_the_runners_socket_answers_its_owner_and_not_another_local_user(runtime):
    import shutil
    import tempfile

    from jupyter_torchdist.kernel.detached.runner import Frames, _Server
    from jupyter_torchdist.core.held_folder import Held

    python = shutil.which("python3", path="/usr/bin:/bin")   # one every user may run (this venv's is root's)
    assert python, "no system python3 to run as another user"
    open_folder = tempfile.mkdtemp(prefix="jtd-open-", dir="/tmp")
    folder = Held(__import__("pathlib").Path(open_folder))
    run = SimpleNamespace(state="running", where="local", title="t", options=RunOptions(), stop=lambda by: True)
    server = _Server(folder, run, Frames())
    os.chmod(open_folder, 0o755)   # as if the folder's guard had failed: the socket's own check still holds
    os.chmod(os.path.join(open_folder, "sock"), 0o777)
    ask = ("import pickle, socket, struct, sys\n"
           "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"   # the path lets it connect: no OSError here
           "data = pickle.dumps({'t': 'runner_stop', 'by': 'a test'})\n"
           "try:\n    s.sendall(struct.pack('>I', len(data)) + data); head = s.recv(4)\n"
           "except OSError:\n    head = b''\n"
           "print(pickle.loads(s.recv(1 << 16)) if head else 'refused: closed')\n")

    def as_user(uid: int) -> str:
        done = subprocess.run([python, "-c", ask, os.path.join(open_folder, "sock")], capture_output=True, text=True,
                              timeout=60, preexec_fn=(lambda: os.setuid(uid)) if uid else None, env={}, cwd="/")
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    try:
        assert as_user(65534) == "refused: closed", "another user's process got an answer"
        assert as_user(0) == "{'stopped': True}"
    finally:
        server.close()
        folder.close()
        shutil.rmtree(open_folder, ignore_errors=True)


def test_peer_is_owner_reads_the_other_ends_uid():
    a, b = socket.socketpair(socket.AF_UNIX)
    with a, b:
        assert store.peer_is_owner(a)


def test_distribute_wait_takes_a_detached_runs_id(runtime):
    import cloudpickle
    from IPython.core.error import UsageError

    from jupyter_torchdist.kernel.magics.background import wait_for

    top = store.held(create=True)
    assert top is not None
    with top, store.run_folder(top, "333333333333", create=True) as folder:
        folder.write_bytes("spec.pkl", b"x")
        folder.write_bytes("outcome.pkl", pickle.dumps({"format": 1, "state": "done", "frame": None,
                                                        "value": cloudpickle.dumps([1, 2])}))
    assert wait_for("333333333333") == [1, 2]   # as %distribute_wait ID: its value
    with pytest.raises(UsageError, match="runs\\(detached=True\\)"):
        wait_for("444444444444")


def test_a_sweeps_member_carries_the_packed_cell_as_it_came_with_its_parameters():
    from jupyter_torchdist.kernel.pickling import pack
    from jupyter_torchdist.rank.sweep_params import PackedCall

    def cell():
        return lr * 10  # noqa: F821  (a sweep's name: set as the cell's global)

    def fn(x, lr=None):
        return (x, lr)

    packed = pack(cell, max_bytes=1 << 20).data
    member = pickle.loads(pickle.dumps(PackedCall(packed, {"lr": 0.2}, as_globals=True)))  # as the runner ships it
    assert member() == 2.0
    assert PackedCall(pack(fn, (1,), max_bytes=1 << 20).data, {"lr": 0.3}, as_globals=False)() == (1, 0.3)


def test_a_detached_sweeps_handle_reads_its_rows_and_best_from_its_outcome(runtime):
    import cloudpickle

    rows = [{"lr": 0.1, "state": "done", "value": 1.0, "run": 1}, {"lr": 0.2, "state": "failed", "run": 2}]
    top = store.held(create=True)
    assert top is not None
    with top, store.run_folder(top, "333333333333", create=True) as folder:
        folder.write_bytes("spec.pkl", b"x")
        folder.write("about.json", {"kind": "sweep", "title": "t", "n": 1})
        folder.write_bytes("outcome.pkl", pickle.dumps({"format": 1, "title": "t", "frame": None, "state": "done",
                                                         "value": cloudpickle.dumps((rows, rows[0]))}))
    sweep = client.attach("333333333333")
    assert isinstance(sweep, client.DetachedSweep) and sweep.wait(10)
    assert sweep.result() == rows and sweep.best() == rows[0] and sweep.value == rows
    assert repr(sweep) == "<DetachedSweep (333333333333) t: done>"


def test_a_detached_sweeps_first_frame_is_a_comparison_with_its_plan(runtime):
    options = parse_options('-n 1 --local --detach --sweep "lr=[0.1, 0.2]; w=[1, 2, 3]"')
    handle = client.DetachedSweep("444444444444", "t", 1)   # no runner: only its first frame
    handle.first_frame(options)
    assert handle.frame["names"] == ["lr", "w"] and handle.frame["trials"] == 6 and handle.frame["runs"] == []
    assert handle.rows() == []


def test_a_sweeps_outcome_keeps_its_rows_and_best_and_a_value_that_cannot_travel_as_its_repr():
    import threading

    import cloudpickle

    from jupyter_torchdist.kernel.detached.runner import _sweep_outcome

    rows = [{"lr": 0.1, "state": "done", "value": 1.0, "run": 1}, {"lr": 0.2, "state": "done", "value": 2.0, "run": 2}]
    sweep = SimpleNamespace(rows=lambda: rows, best=lambda: SimpleNamespace(number=2, params={"lr": 0.2}))
    kept, best = cloudpickle.loads(_sweep_outcome(sweep)["value"])
    assert kept == rows and best == rows[1]
    lock = threading.Lock()   # a member's value no pickle takes: the rows still come, that value as its repr
    odd = [{"lr": 0.1, "state": "done", "value": lock, "run": 1}]
    failing = SimpleNamespace(rows=lambda: odd, best=lambda: (_ for _ in ()).throw(ValueError("no finished member")))
    kept, best = cloudpickle.loads(_sweep_outcome(failing)["value"])
    assert kept == [{"lr": 0.1, "state": "done", "value": repr(lock), "run": 1}] and best is None


def test_a_runner_this_kernel_started_is_collected_as_soon_as_it_exits(runtime, monkeypatch):
    """The kernel's thread that reaps the runner it started looks at once (the outcome is written then), not at its
    next half-second look: with looks an hour apart the value still comes when the runner exits."""
    import sys
    import threading

    import cloudpickle

    monkeypatch.setattr(client, "POLL_S", 3600.0)
    run_id = "333333333333"
    runner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"])
    top = store.held(create=True)
    assert top is not None
    with top, store.run_folder(top, run_id, create=True) as folder:
        folder.write_bytes("spec.pkl", b"x")
        folder.write("runner.json", {"pid": runner.pid, "started": time.time()})
    monkeypatch.setitem(client._spawned, run_id, runner)
    monkeypatch.setitem(client._exits, run_id, threading.Event())
    threading.Thread(target=client._reap, args=(run_id,), daemon=True).start()
    handle = client.attach(run_id)
    assert not handle.done()   # its runner is alive and has said nothing yet
    again = store.held()
    assert again is not None
    with again, store.run_folder(again, run_id) as folder:   # what the runner leaves just before it exits
        folder.write_bytes("outcome.pkl", pickle.dumps({"format": 1, "title": "t", "frame": None, "state": "done",
                                                        "value": cloudpickle.dumps(7)}))
    assert handle.result(30) == 7
    runner.wait()
