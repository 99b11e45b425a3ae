"""The idle release closes Spark's Python workers only the way Spark closes them itself (its own idle check, under the
lock it hands workers out with): jobs started while it asks, again and again, all run; once nothing runs, the idle
workers go within Spark's next check and the daemon stays."""
from __future__ import annotations

import threading
import time

import pytest

from jupyter_torchdist.launchers.session import idle_release, embedded as spark_session

pytestmark = pytest.mark.spark


def _workers(session) -> list[int]:
    jvm = session.sparkContext._gateway.proc
    daemons = [d for d in idle_release._children(jvm.pid) if spark_session.DAEMON_MODULE in idle_release._cmdline(d)]
    return [w for d in daemons for w in idle_release._children(d)]


def test_jobs_started_while_the_release_asks_all_run_and_idle_workers_then_go(spark):
    sc = spark.sparkContext
    results, errors = [], []

    def jobs() -> None:
        for i in range(40):
            try:
                results.append(sc.parallelize(range(4), 4).map(lambda x, i=i: x * i).sum())
            except Exception as exc:  # a task handed a worker that was closed under it
                errors.append(repr(exc)[:300])

    thread = threading.Thread(target=jobs)
    thread.start()
    while thread.is_alive():
        assert idle_release._ask_spark(spark), "Spark's worker factories could not be asked"
        time.sleep(0.05)
    assert not errors and results == [6 * i for i in range(40)]

    assert _workers(spark), "the jobs left idle workers in Spark's pool"
    idle_release._ask_spark(spark)
    deadline = time.monotonic() + 20
    while _workers(spark) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _workers(spark), "Spark closed its idle workers at its next check"
    assert sc.parallelize(range(2), 2).map(lambda x: x + 1).collect() == [1, 2], "a fresh worker forks from the daemon"
