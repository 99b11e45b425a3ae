"""The journal and its shipper: records on disk first, sent in order, nothing lost while a sink is down, and
journals an ended kernel left sent by the next one. (The sinks here are stand-ins; tests/ranks/test_tracking.py
runs a real MLflow server and TensorBoard's reader.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from jupyter_torchdist.tracking import shipper as S
from jupyter_torchdist.tracking.journal import Journal, journal_ids, read_records
from jupyter_torchdist.tracking.mlflow_sink import Down


class Flaky:
    """A sink that is down while ``down`` is set, and keeps what it was sent."""
    name = "mlflow"

    def __init__(self):
        self.down = False
        self.got: list[dict] = []

    def check(self, uri):
        if self.down:
            raise Down("http://127.0.0.1:1 does not answer (refused)")

    def apply(self, records, state):
        self.check(None)
        self.got.extend(records)


_made: list[S.Shipper] = []


@pytest.fixture(autouse=True)
def stop_shippers():
    yield
    while _made:
        _made.pop().stop()


def _shipper(tmp_path, sink) -> S.Shipper:
    shipper = S.Shipper(str(tmp_path))
    shipper.sinks = {"mlflow": sink}
    _made.append(shipper)
    return shipper


def test_records_reach_the_sink_in_order_and_the_journal_goes(tmp_path):
    sink = Flaky()
    shipper = _shipper(tmp_path, sink)
    journal = shipper.open_journal(("mlflow",), None)
    journal.append({"k": "run", "key": "a"})
    for step in range(300):
        journal.append({"k": "m", "key": "a", "pts": [["loss", 1.0 / (step + 1), step, 0]]})
    journal.append({"k": "end", "key": "a"})
    journal.close()
    assert shipper.flush(10)
    steps = [p[2] for r in sink.got if r["k"] == "m" for p in r["pts"]]
    assert steps == list(range(300))
    assert [r["k"] for r in sink.got if r["k"] != "m"] == ["run", "end"]
    assert journal_ids(str(tmp_path)) == [] and not os.path.exists(journal.files)


@pytest.mark.slow  # seconds: waits out a retry
def test_a_sink_down_loses_nothing_and_is_said_once(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(S, "FIRST_DELAY_S", 0.05)
    sink = Flaky()
    shipper = _shipper(tmp_path, sink)
    journal = shipper.open_journal(("mlflow",), None)
    journal.append({"k": "run", "key": "a"})
    shipper.round()
    assert [r["k"] for r in sink.got] == ["run"]
    sink.down = True
    for step in range(50):
        journal.append({"k": "m", "key": "a", "pts": [["loss", 0.5, step, 0]]})
        shipper.round()
        time.sleep(0.01)
    journal.close()
    assert shipper.flush(0.5) is False          # still down: kept
    err = capsys.readouterr().err
    assert err.count("does not answer") == 1 and "records are kept in" in err
    sink.down = False
    assert shipper.flush(10)
    assert [p[2] for r in sink.got if r["k"] == "m" for p in r["pts"]] == list(range(50))
    assert "answers again" in capsys.readouterr().err


def test_a_journal_an_ended_kernel_left_is_sent_by_the_next(tmp_path):
    writer = (f"import sys; sys.path.insert(0, {os.getcwd()!r})\n"
              "from jupyter_torchdist.tracking.journal import Journal\n"
              f"j = Journal(('mlflow',), None, {str(tmp_path)!r})\n"
              "j.append({'k': 'run', 'key': 'x'}); j.append({'k': 'm', 'key': 'x', 'pts': [['loss', 1.0, 0, 0]]})\n"
              "import os; os._exit(0)\n")   # the kernel died: no close record, its lock gone with it
    subprocess.run([sys.executable, "-c", writer], check=True)
    [jid] = journal_ids(str(tmp_path))
    assert [r["k"] for r, _ in read_records(os.path.join(tmp_path, f"{jid}.jsonl"), 0)] == ["head", "run", "m"]
    sink = Flaky()
    shipper = _shipper(tmp_path, sink)
    shipper.round()
    assert [r["k"] for r in sink.got] == ["run", "m"]
    state = json.loads((tmp_path / f"{jid}.state.json").read_text())
    assert state["pos"]["mlflow"] == os.path.getsize(tmp_path / f"{jid}.jsonl")


def test_a_journal_another_live_kernel_holds_is_left_alone(tmp_path):
    other = Journal(("mlflow",), None, str(tmp_path))   # this process holds its lock, as a live kernel would
    other.append({"k": "run", "key": "y"})
    sink = Flaky()
    _shipper(tmp_path, sink).round()
    assert sink.got == []
    other.release()


@pytest.mark.parametrize("records, calls", [
    ([{"k": "m", "key": "a"}] * 3 + [{"k": "m", "key": "b"}] + [{"k": "end", "key": "a"}], [3, 1, 1]),
])
def test_metric_records_of_one_run_go_in_one_call(records, calls):
    grouped = list(S._groups(iter([(r, i) for i, r in enumerate(records)])))
    assert [len(g) for g, _ in grouped] == calls


def test_a_kernel_that_loads_the_extension_sends_what_an_earlier_one_left(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(S._One, "shipper", None)
    S.resume()
    assert S._One.shipper is None   # nothing left: no shipper, no thread
    Journal(("mlflow",), None, os.path.join(tmp_path, "jupyter-torchdist", "tracking")).release()
    S.resume()
    assert S._One.shipper is not None and S._One.shipper.spool.startswith(str(tmp_path))
    _made.append(S._One.shipper)


def test_the_notebooks_config_sets_the_default_tracker(monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_torchdist.core import track_options
    from jupyter_torchdist.core.options import parse_options
    from jupyter_torchdist.kernel.magics.distribute import DistributeMagics

    import jupyter_torchdist.tracking as tracking

    monkeypatch.delenv(track_options.TRACK_ENV, raising=False)
    fetched: list[tuple[str, ...]] = []
    monkeypatch.setattr(tracking, "prefetch", lambda names: fetched.append(tuple(names)))
    magics = DistributeMagics(shell=InteractiveShell.instance())
    try:
        magics.track = "mlflow,tensorboard"   # %config DistributeMagics.track = "mlflow,tensorboard"
        assert parse_options("-n 2").track == ("mlflow", "tensorboard")
        assert fetched == [("mlflow", "tensorboard")], "the packages imported before the first run asks"
        magics.track = ""
        assert parse_options("-n 2").track == ()
    finally:
        track_options.configure_default(None)
        InteractiveShell.clear_instance()
