"""Refusals before anything launches: too few slots (fast, naming the keys), our own session restarted
with more slots instead, --gpu without GPUs (a cluster's checks, faked: unit/test_prelaunch_checks.py).

One Python process holds one SparkContext, so the slot tests run in a subprocess: an IPython shell where
the *user* made a ``local[2]`` session, exactly as in a notebook.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

import jupyter_torchdist as jt
from jupyter_torchdist.core.errors import LaunchError

SCRIPT = textwrap.dedent(r"""
    import json, os, sys, time
    from IPython.core.interactiveshell import InteractiveShell
    import jupyter_torchdist as jt
    from jupyter_torchdist.launchers.session import embedded as backend

    def emit(**kw):
        print("RESULT " + json.dumps(kw), flush=True)

    def tiny():
        import torch, torch.distributed as dist
        t = torch.tensor([float(dist.get_rank())])
        dist.all_reduce(t)
        return int(t.item())

    # 1. our own embedded session: made once with room for every run, quiet, never restarted
    from pyspark.sql import SparkSession
    first, embedded = backend.get_session()
    slots = backend.slots_available(first)
    values = [jt.run(tiny, n=n) for n in (2, 5, 8)]
    second, _ = backend.get_session()
    with open(backend.session_log()) as f:
        log = f.read()
    emit(case="embedded", slots=slots, values=values, same=second is first, alive=first.sparkContext._jsc is not None,
         active=SparkSession.getActiveSession() is first, log=log[-3000:])
    try:
        jt.run(tiny, n=slots + 1)
        emit(case="embedded_too_many", error=None)
    except jt.LaunchError as exc:
        emit(case="embedded_too_many", error=type(exc).__name__, message=str(exc))
    backend.stop_embedded_session()

    # 2. the user's own local[2] session: -n 3 is refused at once, through the magic
    from pyspark.sql import SparkSession
    user = SparkSession.builder.master("local[2]").appName("users-own").config("spark.ui.enabled", "false") \
        .getOrCreate()
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_torchdist")
    jobs = lambda: user.sparkContext._jsc.sc().statusStore().jobsList(None).size()  # every job, any group
    jobs_before = jobs()
    for case, cell in (("slots", "%%distribute -n 3\n1\n"), ("gpu", "%%distribute -n 2 --gpu\n1\n")):
        t0 = time.monotonic()
        result = shell.run_cell(cell)
        err = result.error_in_exec
        emit(case=case, seconds=time.monotonic() - t0, error=type(err).__name__, message=str(err),
             rendered="\n".join(getattr(err, "_render_traceback_", lambda: [])()))
    submitted = jobs() - jobs_before
    alive = user.sparkContext.parallelize(range(4), 2).count()
    emit(case="user_session", alive=alive, master=user.sparkContext.master,
         same=SparkSession.getActiveSession() is user, jobs=submitted, jobs_after_count=jobs() - jobs_before)
    user.stop()
""")


@pytest.fixture(scope="module")
def slot_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("prelaunch") / "slots.py"
    path.write_text(SCRIPT)
    env = dict(os.environ, JUPYTER_TORCHDIST_WARMUP="0", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=240, env=env)
    results = {}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            item = json.loads(line[7:])
            results[item["case"]] = item
    assert done.returncode == 0 and len(results) == 5, done.stdout[-3000:] + done.stderr[-3000:]
    results["stderr"] = done.stderr
    return results


@pytest.mark.spark
def test_too_few_slots_is_refused_at_once_naming_the_keys(slot_run):
    r = slot_run["slots"]
    assert r["error"] == "LaunchError", r
    assert r["seconds"] < 10, f"took {r['seconds']:.1f}s: it must never wait for Spark's slot check"
    msg = r["message"]
    assert "-n 3" in msg and "local[2]" in msg and "has 2" in msg
    for key in ("local[N]", "spark.executor.cores", "spark.cores.max", "spark.task.cpus"):
        assert key in msg
    assert "Traceback" not in r["rendered"] and "LaunchError" in r["rendered"]


@pytest.mark.spark
def test_users_session_is_left_alone(slot_run):
    r = slot_run["user_session"]
    assert r["alive"] == 4 and r["master"] == "local[2]" and r["same"]
    assert r["jobs"] == 0 and r["jobs_after_count"] == 1  # no Spark job for the refused runs (the counter works)


@pytest.mark.spark
def test_our_embedded_session_has_room_from_the_start_and_is_never_restarted(slot_run):
    r = slot_run["embedded"]
    assert r["slots"] == 256 and r["same"] and r["alive"]
    assert r["values"] == [1, 10, 28]
    too_many = slot_run["embedded_too_many"]
    assert too_many["error"] == "LaunchError" and "-n 257" in too_many["message"]
    assert "JUPYTER_TORCHDIST_SPARK_SLOTS" in too_many["message"]


@pytest.mark.spark
def test_the_embedded_session_starts_quietly_and_is_the_active_session(slot_run):
    """The JVM's start-up chatter goes to the session log, not to the user's cell."""
    r = slot_run["embedded"]
    assert r["active"], "SparkSession.getActiveSession() returns the embedded session on the main thread"
    noise = ("Using incubator modules", "log4j", "Setting default log level", "NativeCodeLoader")
    ours = slot_run["stderr"].split("stopped its embedded local Spark session")[0]  # the user's JVM talks as usual
    assert not [n for n in noise if n in ours], ours[-2000:]
    assert any(n in r["log"] for n in noise), "the chatter is kept in the session log"


@pytest.mark.spark
def test_gpu_with_a_cpu_only_torch_is_refused_naming_the_host_and_the_fix(slot_run):
    r = slot_run["gpu"]
    assert r["error"] == "LaunchError" and r["seconds"] < 10
    assert "--gpu on " in r["message"] and "CPU-only build" in r["message"] and "drop --gpu" in r["message"]


@pytest.mark.spark
def test_gpu_refused_in_process_without_launching(spark, descendants):
    before = descendants()
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match="CPU-only build"):
        jt.run(len, [1], n=2, gpu=True)
    assert time.monotonic() - t0 < 5
    assert descendants() <= before  # nothing was started for it
