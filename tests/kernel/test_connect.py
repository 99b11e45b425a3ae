"""A notebook whose session is a Spark Connect client: every capability runs, sparkContext is never touched.

One real Connect server (its own process, local[4]) for the whole test session, and one real kernel holding a
Connect session for this module's tests, as a user on Databricks Connect or Spark 4's thin client would.
"""
from __future__ import annotations

import ast
import json
import textwrap

import pytest

from ..support.kernel import loaded_kernel

pytestmark = pytest.mark.spark

ALL_REDUCE = ("%%distribute -n 2\nimport torch, torch.distributed as dist\n"
              "t = torch.tensor([float(dist.get_rank() + 1)])\ndist.all_reduce(t)\nt.item()")


@pytest.fixture(scope="module")
def kernel(connect_server):
    setup = ("from pyspark.sql import SparkSession\n"
             f"spark = SparkSession.builder.remote({connect_server.url!r}).getOrCreate()\n"
             "import jupyter_torchdist as jt")
    folder = connect_server.notebooks / "connect"  # the server cannot see it, as a remote one could not
    folder.mkdir(exist_ok=True)
    (folder / "beside.py").write_text("VALUE = 7\n")
    with loaded_kernel(setup=setup, cwd=str(folder)) as k:
        yield k


def _ok(kernel, code: str, timeout: float = 240) -> str:
    r = kernel.execute(code, timeout=timeout)
    assert r["status"] == "ok", kernel.text(r)
    return kernel.text(r)


def _value(kernel, code: str, timeout: float = 240) -> str:
    r = kernel.execute(code, timeout=timeout)
    assert r["status"] == "ok", kernel.text(r)
    results = [o for o in r["outputs"] if o["output_type"] == "execute_result"]
    assert results, kernel.text(r)
    return results[-1]["data"]["text/plain"]


def test_a_cell_and_its_rerun_run_on_the_connect_session(kernel):
    assert _value(kernel, "type(spark).__module__") == "'pyspark.sql.connect.session'"
    assert _value(kernel, ALL_REDUCE) == "3.0"
    assert _value(kernel, ALL_REDUCE) == "3.0"
    backend = _value(kernel, "jt.last_run().state.backend")
    assert backend.startswith("'spark connect 127.0.0.1") and "local[4]" in backend
    assert _value(kernel, "%%distribute -n 2 --all-ranks\nimport torch.distributed as dist\ndist.get_rank() * 10") \
        == "[0, 10]"


def test_a_failing_rank_is_named_with_its_traceback(kernel):
    r = kernel.execute("%%distribute -n 2\nimport torch.distributed as dist\nx = 1\n"
                       "if dist.get_rank() == 1:\n    raise KeyError('only on rank 1')\nx")
    text = kernel.text(r)
    assert r["status"] == "error" and "RunFailed" in text
    assert "rank 1" in text and "only on rank 1" in text and "root cause" in text
    assert "sparkContext" not in text and "JVM_ATTRIBUTE_NOT_SUPPORTED" not in text
    assert _value(kernel, ALL_REDUCE) == "3.0"  # the next run is fine


def test_an_interrupt_cancels_only_this_runs_operation(kernel):
    _ok(kernel, textwrap.dedent("""\
        import threading, time
        user_job = {}
        def long_count():
            spark.addTag("users-own")
            try:
                user_job["rows"] = spark.range(0, 4 * 10**9, 1, 2).selectExpr("sum(id)").collect()
            except Exception as exc:
                user_job["error"] = type(exc).__name__ + ": " + str(exc)[:200]
        bystander = threading.Thread(target=long_count, daemon=True)
        bystander.start()
        time.sleep(2)
        """))
    r = kernel.execute("%%distribute -n 2\nimport time\nwhile True:\n    time.sleep(0.05)", interrupt_after=12)
    text = kernel.text(r)
    assert r["status"] == "error" and "RunInterrupted" in text, text
    state = _value(kernel, "import json; json.dumps([bystander.is_alive(), user_job.get('error')])")
    alive, error = json.loads(ast.literal_eval(state))
    assert alive and error is None, error  # the user's own operation was not cancelled
    _ok(kernel, "spark.interruptTag('users-own'); bystander.join(60); assert not bystander.is_alive()")
    assert _value(kernel, ALL_REDUCE) == "3.0"


def test_a_script_the_torch_distributor_class_and_horovod_spark_run(kernel, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import sys, torch, torch.distributed as dist\ndist.init_process_group('gloo')\n"
                      "t = torch.ones(1)\ndist.all_reduce(t)\nprint('world', int(t.item()), sys.argv[1:])\n")
    text = _ok(kernel, f"%distribute -n 2 {script} --lr 0.1")
    assert "world 2 ['--lr', '0.1']" in text
    value = _value(kernel, "from jupyter_torchdist import TorchDistributor\n"
                           "def f(x):\n    import torch.distributed as dist\n    return dist.get_world_size() * x\n"
                           "TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(f, 5)")
    assert value == "10"
    ranks = _value(kernel, "from jupyter_torchdist.horovod import spark as hvd_spark\n"
                           "def g():\n    import torch.distributed as dist\n    return dist.get_rank() + 100\n"
                           "hvd_spark.run(g, num_proc=2, verbose=0)")
    assert ranks == "[100, 101]"


def test_kept_ranks_keep_their_state_across_cells(kernel):
    _ok(kernel, "%%distribute --keep -n 2\nimport torch.distributed as dist\nsteps = 0")
    _ok(kernel, "%%distribute --keep\nsteps += dist.get_rank() + 1")
    assert _value(kernel, "%%distribute --keep --all-ranks\nsteps") == "[1, 2]"
    info = _value(kernel, "k = jt.kept(); (k.backend_name, k.cells, k.holds)")
    assert info == "('connect', 3, 'Spark task slots')"
    text = _ok(kernel, "%distribute_stop")
    assert "stopped the 2 kept ranks" in text and "Spark task slots are free" in text
    assert _value(kernel, ALL_REDUCE) == "3.0"


def test_background_runs_on_the_connect_session_and_a_cell_meanwhile(kernel):
    started = _ok(kernel, "%%distribute -n 2 --background\nimport time, torch, torch.distributed as dist\n"
                          "time.sleep(2)\nt = torch.tensor([float(dist.get_rank() + 1)])\ndist.all_reduce(t)\nt.item()")
    assert "<Run" in started
    assert _value(kernel, "jt.runs()[-1].state") in ("'queued'", "'running'")  # the cell came back at once
    assert _value(kernel, "%distribute_wait") == "3.0"
    assert _value(kernel, "jt.runs()[-1].details.state.backend").startswith("'spark connect")


def test_more_ranks_than_the_server_has_slots_is_refused_at_once(kernel):
    r = kernel.execute("%%distribute -n 9\n1", timeout=60)
    text = kernel.text(r)
    assert r["status"] == "error" and "LaunchError" in text and "-n 9 needs 9 task slots" in text
    assert r["seconds"] < 30


def test_batches_stream_a_connect_dataframe_with_the_transform_on_the_executors(kernel):
    _ok(kernel, "df = spark.range(0, 96, 1, 3).selectExpr('cast(id as double) as x')\n"
                "def tripled(pdf):\n    return {'x': pdf['x'].to_numpy() * 3}")
    value = _value(kernel, "%%distribute -n 2 --all-ranks\nseen = []\n"
                           "for b in jt.batches(df, batch_size=8, transform=tripled):\n    seen += b['x'].tolist()\n"
                           "(len(seen), sum(seen))", timeout=300)
    per_rank = ast.literal_eval(value)
    assert [n for n, _ in per_rank] == [48, 48]  # equal steps: 6 batches of 8 on each rank
    assert sum(total for _, total in per_rank) == 3 * sum(range(96))  # every row once, transformed
    shuffled = ast.literal_eval(_value(kernel, "%%distribute -n 2 --all-ranks\n"
                                               "[float(v) for b in jt.batches(df, 16, shuffle=True, seed=3) "
                                               "for v in b['x']]", timeout=300))
    assert sorted(shuffled[0] + shuffled[1]) == [float(i) for i in range(96)]  # every row exactly once
    assert shuffled[0] != sorted(shuffled[0])  # in a shuffled order


def test_an_unreachable_channel_still_brings_back_the_value_tracebacks_and_logs(kernel):
    """The executors dial an address nothing listens on (as behind NAT): the run goes offline within seconds,
    rank 0's task relays, and the value, each rank's end, traceback and log tail come back with the rows."""
    _ok(kernel, "import socket\ns = socket.socket(); s.bind(('127.0.0.1', 0)); closed = s.getsockname()[1]; s.close()\n"
                "spark.conf.set('spark.jupyter_torchdist.channel.advertise', f'127.0.0.1:{closed}')")
    try:
        r = kernel.execute("%%distribute -n 2\nimport torch, torch.distributed as dist\n"
                           "print('hello from rank', dist.get_rank())\nt = torch.tensor([float(dist.get_rank() + 1)])\n"
                           "dist.all_reduce(t)\nt.item()", timeout=240)
        assert r["status"] == "ok", kernel.text(r)
        assert [o["data"]["text/plain"] for o in r["outputs"] if o["output_type"] == "execute_result"] == ["3.0"]
        notices = _value(kernel, "jt.last_run().state.notices()")
        assert "live progress is unavailable" in notices and "spark.jupyter_torchdist.channel" in notices
        assert "hello from rank 1" in _value(kernel, "str(jt.last_run().logs[1])")
        again = kernel.execute("%%distribute -n 2 --all-ranks\nimport torch.distributed as dist, beside\n"
                               "(dist.get_rank(), beside.VALUE)")  # the notebook's module: the plan carries it now
        assert again["status"] == "ok" and "[(0, 7), (1, 7)]" in kernel.text(again), kernel.text(again)
        assert "live progress is unavailable" in kernel.text(again)  # said up front once the session is known
        failed = kernel.execute("%%distribute -n 2\nimport torch.distributed as dist\n"
                                "if dist.get_rank() == 1:\n    raise KeyError('offline failure on rank 1')\n1")
        text = kernel.text(failed)
        assert failed["status"] == "error" and "RunFailed" in text and "offline failure on rank 1" in text
        assert "rank 1" in text and "root cause" in text
        kept = kernel.execute("%%distribute --keep -n 2\n1", timeout=60)
        assert kept["status"] == "error" and "kept ranks cannot run here" in kernel.text(kept)
    finally:
        _ok(kernel, "spark.conf.unset('spark.jupyter_torchdist.channel.advertise')")
    assert _value(kernel, ALL_REDUCE) == "3.0"  # back on the live channel
    assert _value(kernel, "%%distribute -n 2\nimport beside\nbeside.VALUE") == "7"  # fetched from the kernel
    assert "live progress" not in _value(kernel, "jt.last_run().state.notices()")


def test_a_detached_run_goes_to_the_notebooks_connect_server_and_its_value_comes_back_by_id(kernel):
    import re

    shown = _ok(kernel, ALL_REDUCE.replace("%%distribute -n 2", "%%distribute -n 2 --detach"))
    found = re.search(r"<DetachedRun \(([0-9a-f]{12})\)", shown)
    assert found, shown
    value = _value(kernel, f"h = jt.attach({found.group(1)!r})\n(h.result(timeout=200), h.where)", timeout=240)
    assert value.startswith("(3.0, 'spark connect 127.0.0.1"), value   # its runner joined the same server
