"""The shipper's lanes: one per destination (a tracker and where it records), so one that does not answer never
holds back another's records; what goes wrong sorted (down: kept and tried again; refused: said at once with what to
do, tried again when the credentials change; one record refused: skipped); the journal bounded; the command line's
list, resend and drop. (Stand-in sinks here; tests/ranks/test_tracking_faults.py runs a real MLflow server.)"""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from jupyter_torchdist.core.errors import OptionsError
from jupyter_torchdist.core.options import RunOptions
from jupyter_torchdist.core.track_options import JOURNAL_ENV, check_environment
from jupyter_torchdist.tracking import cli, lane
from jupyter_torchdist.tracking import shipper as S
from jupyter_torchdist.tracking.journal import Journal, journal_ids
from jupyter_torchdist.tracking.outbox import waiting
from jupyter_torchdist.tracking.sink import Down, Refused, Rejected, Sink

DEAD, LIVE = "http://10.255.255.1:5000", "http://127.0.0.1:5000"


class StandIn(Sink):
    """MLflow's stand-in: answers at ``LIVE``; at ``DEAD`` a check hangs (an address that drops packets) until the
    test ends, then says it is down. ``refuse`` makes it refuse the credentials it was given."""
    name = "mlflow"

    def __init__(self):
        self.got: dict[str, list[dict]] = {}
        self.released = threading.Event()
        self.refuse: str | None = None
        self.key = "old"
        self.checks = 0
        self.bad: set[str] = set()       # record kinds it refuses
        self.broken: set[str] = set()    # record kinds it fails for reasons it does not name

    def credentials(self):
        return self.key

    def check(self, ledger):
        self.checks += 1
        if ledger.address == DEAD:
            self.released.wait(60)
            raise Down("does not answer (timed out)")
        if self.refuse is not None and self.key == self.refuse:
            raise Refused("refuses this kernel's credentials (401 Unauthorized)", "set MLFLOW_TRACKING_TOKEN")

    def apply(self, records, ledger):
        kind = records[0]["k"]
        if kind in self.bad:
            raise Rejected("INVALID_PARAMETER_VALUE: a value it does not store")
        if kind in self.broken:
            raise ValueError("something nobody named")
        self.got.setdefault(ledger.address, []).extend(records)


_made: list[S.Shipper] = []


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(S, "FIRST_DELAY_S", 0.01)
    monkeypatch.setattr(S, "MAX_DELAY_S", 0.05)
    yield
    while _made:
        shipper = _made.pop()
        shipper.stop()
        for sink in shipper.sinks.values():
            if isinstance(sink, StandIn):
                sink.released.set()


def _shipper(spool, sink: StandIn) -> S.Shipper:
    shipper = S.Shipper(str(spool))
    shipper.sinks = {"mlflow": sink}
    _made.append(shipper)
    return shipper


def _run(journal: Journal, key: str, steps: int) -> None:
    journal.append({"k": "run", "key": key, "params": {"lr": 0.1}})
    for step in range(steps):
        journal.append({"k": "m", "key": key, "pts": [["loss", 1.0 / (step + 1), step, 0]]})
    journal.append({"k": "end", "key": key})
    journal.close()


def _steps(records: list[dict]) -> list[int]:
    return [p[2] for r in records if r["k"] == "m" for p in r["pts"]]


def test_a_destination_that_does_not_answer_never_holds_back_another(tmp_path):
    # an earlier kernel's journal for a server that drops packets, left in the same cache folder
    Journal(("mlflow",), DEAD, str(tmp_path), {"mlflow": {"uri": DEAD}}).release()
    sink = StandIn()
    shipper = _shipper(tmp_path, sink)
    _run(shipper.open_journal(("mlflow",), LIVE, {"mlflow": {"uri": LIVE}}), "live", 20)
    assert shipper.flush(20)   # while the dead server's check hangs on its own lane
    assert _steps(sink.got[LIVE]) == list(range(20))
    assert DEAD not in sink.got and len(journal_ids(str(tmp_path))) == 1   # the dead one's records wait


def test_refused_credentials_are_said_at_once_and_tried_again_only_when_they_change(tmp_path, capsys):
    sink = StandIn()
    sink.refuse = "old"
    shipper = _shipper(tmp_path, sink)
    _run(shipper.open_journal(("mlflow",), LIVE, {"mlflow": {"uri": LIVE}}), "a", 5)
    assert shipper.flush(20) is False   # at once: nothing to wait for
    err = capsys.readouterr().err
    assert "mlflow http://127.0.0.1:5000 refuses this kernel's credentials (401 Unauthorized): set " \
           "MLFLOW_TRACKING_TOKEN" in err and err.count("refuses") == 1
    checks = sink.checks
    for _ in range(5):
        shipper.round()
    assert sink.checks == checks   # not tried for ever
    [entry] = waiting(str(tmp_path))
    assert entry.status["state"] == "refused" and entry.status["fix"] == "set MLFLOW_TRACKING_TOKEN"
    assert "refused: refuses this kernel's credentials" in cli.describe(entry)
    sink.key = "new"   # MLFLOW_TRACKING_TOKEN set
    assert shipper.flush(20)
    assert _steps(sink.got[LIVE]) == list(range(5)) and waiting(str(tmp_path)) == []


def test_a_record_the_tracker_refuses_is_said_and_skipped_and_the_rest_go(tmp_path, capsys):
    sink = StandIn()
    sink.bad = {"end"}
    shipper = _shipper(tmp_path, sink)
    _run(shipper.open_journal(("mlflow",), LIVE, {"mlflow": {"uri": LIVE}}), "a", 3)
    journal = shipper.open_journal(("mlflow",), LIVE, {"mlflow": {"uri": LIVE}})
    _run(journal, "b", 3)
    assert shipper.flush(20)
    assert [r["key"] for r in sink.got[LIVE] if r["k"] == "run"] == ["a", "b"]
    assert "refused a end record of a (INVALID_PARAMETER_VALUE" in capsys.readouterr().err


def test_a_failure_nobody_names_is_tried_a_few_times_then_skipped(tmp_path, capsys):
    sink = StandIn()
    sink.broken = {"run"}
    shipper = _shipper(tmp_path, sink)
    _run(shipper.open_journal(("mlflow",), LIVE, {"mlflow": {"uri": LIVE}}), "a", 3)
    assert shipper.flush(20)
    assert _steps(sink.got[LIVE]) == [0, 1, 2]
    err = capsys.readouterr().err
    assert f"failed a run record of a {lane.RECORD_TRIES} times (ValueError: something nobody named)" in err


def test_the_journals_are_bounded_said_before_and_at_the_bound(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(JOURNAL_ENV, "0.02")   # 20 KB
    journal = Journal(("mlflow",), LIVE, str(tmp_path / "spool"))
    journal.append({"k": "run", "key": "a"})
    for step in range(1000):
        journal.append({"k": "m", "key": "a", "pts": [["loss", 0.5, step, 1700000000000]]})
    journal.append({"k": "end", "key": "a"})
    journal.release()
    err = capsys.readouterr().err
    assert err.count("of their bound") == 1 and "past it, runs' metric points are not kept" in err
    assert err.count("fill their bound") == 1 and "jupyter-torchdist tracking" in err
    assert 0 < journal.dropped["a"] < 1000
    assert os.path.getsize(journal.path) <= 0.02 * 1024 * 1024 + 200
    monkeypatch.setenv(JOURNAL_ENV, "lots")
    with pytest.raises(OptionsError, match=f"{JOURNAL_ENV} is the most megabytes"):
        check_environment(RunOptions(track=("mlflow",)))


@pytest.mark.slow  # seconds: the command line in fresh processes
def test_the_command_line_lists_resends_and_drops(tmp_path, monkeypatch, capsys):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    spool = tmp_path / "jupyter-torchdist" / "tracking"
    nobody = "http://127.0.0.1:9"   # nothing listens: refused at once
    for key in ("a", "b"):
        journal = Journal(("mlflow", "tensorboard"), nobody, str(spool),
                          {"mlflow": {"uri": nobody}, "tensorboard": {"logdir": str(tmp_path / "runs")}})
        _run(journal, key, 2)
        journal.release()
    assert cli.main([]) == 0
    listed = capsys.readouterr().out
    assert "1. mlflow http://127.0.0.1:9: records of 2 runs not yet sent" in listed
    assert f"2. tensorboard {tmp_path / 'runs'}: records of 2 runs not yet sent" in listed
    assert cli.main(["resend", "tensorboard", "--timeout", "30"]) == 0   # a folder: sent here and now
    assert [e.tracker for e in waiting(str(spool))] == ["mlflow"]
    assert cli.main(["resend", "mlflow", "--timeout", "2"]) == 1
    assert "down since" in capsys.readouterr().out
    assert cli.main(["drop", "1"]) == 0
    assert "mlflow http://127.0.0.1:9: records of 2 run(s) dropped" in capsys.readouterr().out
    assert waiting(str(spool)) == [] and journal_ids(str(spool)) == []
    assert cli.main(["drop"]) == 2 and cli.main(["drop", "wandb"]) == 2


def test_the_command_is_jupyter_torchdist_tracking(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    listed = subprocess.run([sys.executable, "-m", "jupyter_torchdist", "tracking"], capture_output=True, text=True,
                            env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert listed.returncode == 0 and "nothing waits in" in listed.stdout, listed.stderr
    usage = subprocess.run([sys.executable, "-m", "jupyter_torchdist", "tracking", "drop"], capture_output=True,
                           text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert usage.returncode == 2 and "usage: jupyter-torchdist tracking" in usage.stderr
