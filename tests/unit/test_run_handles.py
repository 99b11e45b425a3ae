"""The handles a notebook holds (kernel/runs/run.py, kernel/runs/history.py, kernel/sweeps/comparison.py,
kernel/runs/view_requests.py):
states, waiting, values and errors, stops that reach only their run, and the tables. No ranks: the drivers' side is
played here."""
from __future__ import annotations

import queue
import threading

import pytest

from jupyter_torchdist.core import contract as C
from jupyter_torchdist.core.errors import RankFailure, RunFailed, RunInterrupted
from jupyter_torchdist.kernel.runs import view_requests as control
from jupyter_torchdist.kernel.runs.run import RunList
from jupyter_torchdist.kernel.runs.history import new_run
from jupyter_torchdist.kernel.sweeps.comparison import metric_of, results_rows, sweep_snapshot
from jupyter_torchdist.core.options import RunOptions


def _failed(summary: str) -> RunFailed:
    return RunFailed(f"rank 1 failed first: {summary}", {1: RankFailure(1, "host", "exception", summary)}, 2)


_made: list = []


@pytest.fixture(autouse=True)
def _end_the_runs_made():
    """The runs these tests make sit in the kernel's one registry: end every one left going, so that no later test
    (an administrator's limit on background runs at once) counts them."""
    yield
    while _made:
        run = _made.pop()
        if not run.done():
            run.finish(None, None, RunInterrupted("ended by the test that made it"))


def _run(**params):
    run = new_run("%%distribute -n 2 --background", RunOptions(background=True), params or None)
    _made.append(run)
    return run


def test_a_run_goes_from_queued_to_done_and_gives_its_value_once_ended():
    run = _run()
    assert run.state == "queued" and not run.done() and run.wait(0.01) is False
    with pytest.raises(TimeoutError, match="has not ended after 0.01 s"):
        run.result(timeout=0.01)
    run.running()
    threading.Timer(0.1, run.finish, args=(42, None, None)).start()
    assert run.result(timeout=5) == 42 and run.state == "done" and run.seconds() is not None
    assert repr(run).endswith(": done>") and run.stop() is False  # an ended run cannot be stopped


def test_a_failed_run_raises_its_own_error_each_time_and_a_stopped_one_says_stopped():
    failed, stopped = _run(), _run()
    error = _failed("ValueError: boom")
    failed.finish(None, None, error)
    for _ in range(2):
        with pytest.raises(RunFailed) as caught:
            failed.result()
        assert caught.value is error
    stopped.finish(None, None, RunInterrupted("stopped by run.stop(): every rank was stopped"))
    assert (failed.state, stopped.state) == ("failed", "stopped")
    assert failed.summary() == "rank 1 failed first: ValueError: boom"


def test_a_stop_reaches_the_runs_own_inbox_even_when_asked_before_its_ranks_listen():
    early, late, other = _run(), _run(), _run()
    assert early.stop() is True and early.stop_asked == "run.stop()"
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    early.attach(inbox)  # the ranks came up after the stop: it is delivered at once
    assert inbox.get_nowait().msg == {"t": C.STOP_WANTED, "by": "run.stop()"}
    mine, theirs = queue.SimpleQueue(), queue.SimpleQueue()
    late.attach(mine)
    other.attach(theirs)
    late.stop("the view's Stop")
    assert mine.get_nowait().msg["by"] == "the view's Stop" and theirs.empty()


def test_the_views_requests_on_the_control_channel_reach_the_named_run_only():
    target, bystander = _run(), _run()
    inboxes = {target.number: queue.SimpleQueue(), bystander.number: queue.SimpleQueue()}
    target.attach(inboxes[target.number])
    bystander.attach(inboxes[bystander.number])
    assert control._accept({"want": "stacks", "run": target.number}) is True
    assert inboxes[target.number].get_nowait().msg == {"t": C.WHERE_WANTED}
    assert control._accept({"want": "stop", "run": target.number}) is True
    assert inboxes[target.number].get_nowait().msg["t"] == C.STOP_WANTED and inboxes[bystander.number].empty()
    assert control._accept({"want": "stop", "run": 10**9}) is False and control._accept({"want": "stop"}) is False
    # a many-rank run's view opened ranks 17 and 3: that run's next frame shows them in full
    assert control._accept({"want": "focus", "ranks": [17, 3], "run": target.number}) is True
    assert inboxes[target.number].get_nowait().msg == {"t": C.FOCUS_WANTED, "ranks": [17, 3]}
    assert control._accept({"want": "focus", "ranks": ["17"], "run": target.number}) is False, "ranks are numbers"
    assert control._accept({"want": "focus", "ranks": 17, "run": target.number}) is False
    assert inboxes[target.number].empty() and inboxes[bystander.number].empty()


def test_runs_show_as_a_table_in_text_and_html():
    ok, bad = _run(lr=0.1), _run()
    ok.running()
    ok.where = "spark local[4]"  # where its ranks ran, once they started (the table says it)
    ok.finish(3.5, None, None)
    bad.finish(None, None, _failed("KeyError: 'x'"))
    table = RunList([ok, bad])
    lines = repr(table).splitlines()
    assert lines[0].split() == ["run", "id", "title", "state", "ranks", "on", "seconds", "outcome"]
    assert lines[1].split()[:2] == [str(ok.number), ok.id] and ok.id != bad.id
    assert "spark local[4]" in lines[1] and f"({ok.id})" in repr(ok) and " on spark local[4]: done>" in repr(ok)
    assert "[lr=0.1]" in lines[1] and lines[1].rstrip().endswith("3.5") and "failed" in lines[2]
    assert "<table" in table._repr_html_() and "KeyError: &#x27;x&#x27;" in table._repr_html_()


def _latest(run_id: int, metrics: dict, loss: list) -> dict:
    return {"run_id": run_id, "headline": "", "error": None, "value_repr": None,
            "ranks": [{"step": len(loss), "total": 10, "rate": 2.0, "metrics": metrics, "loss_history": loss}]}


def test_a_sweeps_rows_hold_parameters_values_metrics_and_failures_and_best_reads_them():
    a, b, c = _run(lr=0.1), _run(lr=0.01), _run(lr=1.0)
    a.finish({"loss": 0.5, "acc": 0.9}, None, None)
    b.finish(0.25, None, None)
    c.finish(None, None, _failed("nan loss"))
    latest = {a.number: _latest(a.number, {"loss": 0.6}, [[1, 1.0], [2, 0.6]]),
              b.number: _latest(b.number, {"loss": 0.3}, [])}
    rows = results_rows([a, b, c], latest)
    assert rows[0]["lr"] == 0.1 and rows[0]["value.loss"] == 0.5 and rows[0]["loss"] == 0.6
    assert rows[1]["value"] == 0.25 and rows[2]["state"] == "failed" and "nan loss" in rows[2]["error"]
    assert metric_of(rows[0], "loss") == 0.5 and metric_of(rows[1], "loss") == 0.3
    assert metric_of(rows[2], "loss") is None
    snap = sweep_snapshot("sweep", ["lr"], [a, b, c], latest, now=10.0, started_at=4.0, concurrent=2)
    assert snap["status"] == "failed" and snap["counts"]["done"] == 2 and snap["elapsed_s"] == 6.0
    assert snap["runs"][0]["loss"] == [[1.0, 1.0], [2.0, 0.6]] and snap["runs"][2]["error"]


def test_a_run_and_a_sweep_are_one_handle_type_whose_verbs_answer_alike():
    from jupyter_torchdist.kernel.handle import Handle
    from jupyter_torchdist.kernel.sweeps.sweep import Sweep

    assert issubclass(type(_run()), Handle) and issubclass(Sweep, Handle)
    assert Sweep.wait is Handle.wait and Sweep.result is Handle.result and Sweep.done is Handle.done
    run = _run()
    assert run.stop() is True and run.stop() is True  # asked twice while going: still going each time
    run.finish(None, None, RunInterrupted("stopped by run.stop()"))
    assert run.stop() is False and run.state == "stopped" and isinstance(run.error, RunInterrupted)



def test_distribute_wait_finds_a_run_by_its_number_or_its_durable_id_and_says_when_neither_is_there():
    from IPython.core.error import UsageError

    from jupyter_torchdist.kernel.magics.background import _which

    run = new_run("%%distribute -n 2 --background", RunOptions(n=2, background=True))
    assert _which(str(run.number)) is run and _which(run.id) is run and _which(f"#{run.number}") is run
    with pytest.raises(UsageError, match="no run 0123456789ab in this kernel: %distribute_wait takes a run.s number"):
        _which("0123456789ab")
