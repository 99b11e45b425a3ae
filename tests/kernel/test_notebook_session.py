"""Runs go to the notebook's own Spark session from every thread, as a user has it: the extension's warm-up on (its
default), ``%load_ext`` first, then the notebook's own ``local[4]`` session. Background runs, a sweep's members and a
``run()`` called from a thread of the user's choose their backend off the main thread, where the JVM's active
session is None: each must still go to the notebook's session (never to local processes or an embedded session
started beside it), queue there for its slots, and say where it ran."""
from __future__ import annotations

import pytest

from ..support.kernel import loaded_kernel

pytestmark = pytest.mark.spark

SLEEPY = ("%%distribute -n 2 --background\nimport time\nfor i in range({steps}):\n    time.sleep(0.1)\n"
          "    jupyter_torchdist.report(step=i + 1, total={steps})\nimport os\nos.getppid()")
NOTHING_OF_OURS = ("from jupyter_torchdist.launchers import local_server\n"
                   "from jupyter_torchdist.launchers.session import embedded\n"
                   "print(local_server.zygote_pid(), embedded.embedded_session())")


@pytest.fixture(scope="module")
def kernel():
    setup = ("import sys\nfrom pyspark.sql import SparkSession\n"
             "spark = SparkSession.builder.master('local[4]').config('spark.pyspark.python', sys.executable)"
             ".getOrCreate()\nimport jupyter_torchdist as jt, jupyter_torchdist")
    with loaded_kernel({"JUPYTER_TORCHDIST_WARMUP": "1"}, setup=setup) as k:
        yield k


def test_background_runs_queue_for_the_notebooks_own_session_and_never_run_as_local_processes(kernel):
    for steps in (30, 30, 3):
        assert kernel.execute(SLEEPY.format(steps=steps))["status"] == "ok"
    said = kernel.ok("a, b, c = jt.runs()[-3:]\nimport time\nt0 = time.time()\n"
                     "while ('queued' in (a.state, b.state) or '0 of 4 free' not in (c.waiting_for or '')) "
                     "and time.time() - t0 < 60: time.sleep(0.05)\n"
                     "print(a.state, b.state, c.state)\nprint(c.waiting_for)")
    states, waiting = said.splitlines()
    assert states == "running running queued", said
    assert waiting.startswith("queued: needs 2 task slots of the Spark session, 0 of 4 free"), said
    ended = kernel.ok("for r in (a, b, c): r.wait(120)\nprint([r.state for r in (a, b, c)])\n"
                      "print([r.where for r in (a, b, c)])\nprint(repr(c))\n"
                      "print(c.details.report().snapshot['backend'])")
    states, wheres, shown, backend = ended.splitlines()
    assert states == "['done', 'done', 'done']", ended
    assert wheres == "['spark local[4]', 'spark local[4]', 'spark local[4]']", ended
    assert " on spark local[4]: done>" in shown and backend == "spark local[4]", ended
    # the ranks' parent is a Spark Python worker, not the local process server; nothing of ours started beside it
    parents = kernel.ok("import os\nprint([open(f'/proc/{r.result()}/cmdline').read().replace(chr(0), ' ') "
                        "if os.path.exists(f'/proc/{r.result()}') else 'gone' for r in (a, b, c)])")
    assert "local_server" not in parents and "pyspark" in parents, parents
    assert kernel.ok(NOTHING_OF_OURS) == "None None"


def test_a_sweeps_members_and_a_run_from_a_users_thread_go_to_the_notebooks_session(kernel):
    r = kernel.execute("%%distribute -n 2 --sweep \"lr=[0.1, 0.01, 0.001]\"\n"
                       "jupyter_torchdist.report(step=1, loss=lr)\nlr")
    assert r["status"] == "ok", kernel.text(r)
    wheres = kernel.ok("s = %distribute_wait\nprint(sorted({m.where for m in jt.runs()[-3:]}))")
    assert wheres.splitlines()[-1] == "['spark local[4]']", wheres
    threaded = kernel.ok("import threading\nout = []\n"
                         "t = threading.Thread(target=lambda: out.append(jt.run(lambda: 7, n=2)))\n"
                         "t.start(); t.join(120)\nprint(out, jt.runs()[-1].where)")
    assert threaded == "[7] spark local[4]", threaded
    assert kernel.ok(NOTHING_OF_OURS) == "None None"
