"""Several runs at once on a Spark session of the notebook's own (local[4], 4 task slots), in a real kernel: the third
2-rank run waits its turn and says for what, an interrupt of the user's own Spark job leaves our runs training, a
sweep of six combinations runs two at a time with one comparison view and its table."""
from __future__ import annotations

import re

import pytest

from ..support.kernel import loaded_kernel

pytestmark = pytest.mark.spark

SWEEP_MIME = "application/vnd.jupyter-torchdist.sweep+json"
SLEEPY = ("%%distribute -n 2 --background\nimport time\nfor i in range({steps}):\n    time.sleep(0.1)\n"
          "    jupyter_torchdist.report(step=i + 1, total={steps}, loss=lr / (i + 1))\n{value}")


@pytest.fixture(scope="module")
def kernel():
    setup = ("import sys\nfrom pyspark.sql import SparkSession\n"
             "spark = SparkSession.builder.master('local[4]').appName('mine')"
             ".config('spark.pyspark.python', sys.executable).getOrCreate()\n"
             "import jupyter_torchdist as jt, jupyter_torchdist\nlr = 1.0")
    with loaded_kernel(setup=setup) as k:
        yield k


def test_a_third_run_waits_its_turn_for_slots_and_starts_when_one_ends(kernel):
    for steps in (40, 40, 5):
        assert kernel.execute(SLEEPY.format(steps=steps, value=steps))["status"] == "ok"
    states = kernel.ok("a, b, c = jt.runs()[-3:]\nimport time\nt0 = time.time()\n"
                       "while 'queued' in (a.state, b.state) and time.time() - t0 < 60: time.sleep(0.1)\n"
                       "print(a.state, b.state, c.state)")
    assert states == "running running queued", states
    waited = kernel.ok("for r in (a, b, c): r.wait(120)\nprint([r.state for r in (a, b, c)])\n"
                       "print(c.started_at >= min(a.ended_at, b.ended_at))\n"
                       "print(c.details.report().snapshot['backend'])")
    states, after, backend = waited.splitlines()
    assert states == "['done', 'done', 'done']" and after == "True"
    assert "local[4]" in backend and "embedded" not in backend
    # the runs panel links each run to the Spark UI of the session it ran on (the notebook's, not one of ours)
    links = kernel.ok("from jupyter_torchdist.panel import publisher, listing\npub = publisher.current()\n"
                      "pub.tick(time.time() + 60)\nui = spark.sparkContext.uiWebUrl\n"
                      "print(ui is not None and c.ui_url == ui, [l for e in listing.list_runs(pub.folder, True)"
                      " if e['kernel_id'] == pub.kernel_id and e['kind'] == 'run' and e['id'] == c.id"
                      " for l in e['links']] == "
                      "[{'kind': 'spark', 'label': 'Spark UI', 'url': ui}])")
    assert links == "True True", links


def test_a_queued_run_says_which_runs_hold_the_slots(kernel):
    for steps in (30, 30, 2):
        kernel.execute(SLEEPY.format(steps=steps, value=repr(steps)))
    said = kernel.ok("a, b, c = jt.runs()[-3:]\nimport time\nt0 = time.time()\n"
                     "while 'it goes next' not in (c.waiting_for or '') and time.time() - t0 < 60: "
                     "time.sleep(0.05)\nprint(c.waiting_for)\nprint(jt.runs())")
    # (for a moment the second run may still be on its way to its slots: "2 of 4 free; ahead of it: run N")
    assert said.startswith("queued: needs 2 task slots of the Spark session, 0 of 4 free; held by run ") and \
        "it goes next" in said.splitlines()[0], said
    assert "queued: needs 2 task slots" in said.splitlines()[-1]  # the runs table says it too
    assert kernel.ok("%distribute_wait") == "2"


def test_an_interrupt_of_the_users_own_spark_job_leaves_our_runs_training(kernel):
    assert kernel.execute(SLEEPY.format(steps=40, value="'trained'"))["status"] == "ok"
    kernel.ok("run = jt.runs()[-1]\nimport time\nt0 = time.time()\n"
              "while run.state != 'running' and time.time() - t0 < 60: time.sleep(0.1)")
    r = kernel.execute("spark.sparkContext.parallelize(range(2), 2).map(lambda x: __import__('time').sleep(60))"
                       ".collect()", interrupt_after=2.0, timeout=60)
    assert r["status"] == "error" and r["error"]["ename"] == "KeyboardInterrupt", kernel.text(r)
    assert kernel.ok("print(run.result(timeout=60), run.state)") == "trained done"


def test_a_sweep_of_six_runs_two_at_a_time_with_one_comparison_view_and_a_table(kernel):
    seen: list[dict] = []
    r = kernel.execute("%%distribute -n 2 --sweep \"lr=[0.1, 0.01, 0.001]; batch=[32, 64]\"\nimport time\n"
                       "for i in range(10):\n    time.sleep(0.05)\n"
                       "    jupyter_torchdist.report(step=i + 1, total=10, loss=lr * batch / (i + 1))\n"
                       "if lr == 0.01 and batch == 64:\n    raise ValueError('diverged')\n{'loss': lr * batch}",
                       watch=seen.append)
    assert r["status"] == "ok" and re.search(r"<Sweep [0-9a-f]{12} of 6 members over lr, batch", kernel.text(r)), \
        kernel.text(r)
    table = kernel.ok("import pandas as pd\npd.set_option('display.width', 250)\ndf = %distribute_wait\n"
                      "print(df[['lr', 'batch', 'state', 'value.loss', 'loss']].to_string())\n"
                      "s = jt.runs()[-1].sweep\nprint(s.best('loss').params, s.concurrent)", watch=seen.append)
    lines = table.splitlines()
    assert len(lines) == 1 + 6 + 1 and lines[-1] == "{'lr': 0.001, 'batch': 32} 2", table
    assert [line.split()[3] for line in lines[1:7]] == ["done", "done", "done", "failed", "done", "done"]
    error = kernel.ok("print(df.loc[3, 'error'])")
    assert "ValueError: diverged" in error
    reports = [m["content"]["data"][SWEEP_MIME] for m in seen if m["msg_type"] == "update_display_data"
               and SWEEP_MIME in m["content"]["data"]]
    assert reports and reports[-1]["status"] == "failed" and len(reports[-1]["runs"]) == 6
    assert reports[-1]["counts"] == {"queued": 0, "running": 0, "done": 5, "failed": 1, "stopped": 0,
                                     "stopped_early": 0}
    assert all(len(run["loss"]) == 10 for run in reports[-1]["runs"] if run["state"] == "done")
    at_once = kernel.ok("runs = s.runs\nprint(max(sum(1 for o in runs if o.started_at <= r.started_at < o.ended_at)"
                        " for r in runs))")
    assert at_once == "2"


def test_interrupting_a_foreground_run_at_each_stage_leaves_background_runs_sweeps_and_kept_ranks_alone(kernel):
    """local[4]: kept ranks, a background run and a sweep hold three slots; a foreground run is interrupted while
    queued (it needs two), while starting and while training. The others go on and end well."""
    kernel.ok("%%distribute -n 1 --keep\nkept = 'alive'")
    assert kernel.execute(SLEEPY.format(steps=200, value="'background'").replace("-n 2", "-n 1"))["status"] == "ok"
    r = kernel.execute("%%distribute -n 1 --sweep \"lr=[1.0, 2.0]\" --concurrent 1\nimport time\ntime.sleep(8)\nlr")
    assert r["status"] == "ok", kernel.text(r)
    kernel.ok("bg, sweep = jt.runs()[-3], jt.runs()[-1].sweep\nimport time\nt0 = time.time()\n"
              "while (bg.state, sweep.runs[0].state) != ('running', 'running') and time.time() - t0 < 60: "
              "time.sleep(0.1)")
    for cell, after in (("%%distribute -n 2\n1", 2.0),                                    # queued: 1 slot free
                        ("%%distribute -n 1\nimport time\ntime.sleep(60)", 0.5),            # starting
                        ("%%distribute -n 1\nimport time\ntime.sleep(60)", 4.0)):           # training
        r = kernel.execute(cell, interrupt_after=after, timeout=60)
        assert r["status"] == "error", kernel.text(r)
        assert r["error"]["ename"] in ("KeyboardInterrupt", "RunInterrupted"), kernel.text(r)
    assert kernel.ok("%%distribute --keep\nkept").endswith("'alive'"), "the kept ranks answer"
    ended = kernel.ok("print(bg.result(timeout=120), bg.state)\nsweep.wait(120)\n"
                      "print([r.state for r in sweep.runs])\n%distribute_stop")
    assert ended.splitlines()[:2] == ["background done", "['done', 'done']"], ended
