"""The %%distribute magic in a real IPython kernel, as a notebook uses it."""
from __future__ import annotations

import re

import pytest

from ..support.procs import descendants_of
from ..support.kernel import Kernel, loaded_kernel

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def kernel():
    with loaded_kernel() as k:
        yield k


def _ansi_free(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_help_lists_every_option(kernel):
    r = kernel.execute("%%distribute?\n")
    page = str(r["payload"])
    for flag in ("-n", "--gpu", "--output", "--timeout", "--local", "--all-ranks", "--quiet"):
        assert flag in page


def test_cell_value_output_and_notebook_definitions(kernel):
    r = kernel.execute(
        "import torch\n"
        "class Scale:\n    def __init__(self, k):\n        self.k = k\n"
        "def double(v):\n    return Scale(2).k * v\n"
        "UNUSED = bytearray(10_000_000)\n")
    assert r["status"] == "ok"
    r = kernel.execute(
        "%%distribute -n 2 -o answer\n"
        "import torch.distributed as dist\n"
        "t = torch.tensor([float(dist.get_rank() + 1)])\n"
        "dist.all_reduce(t)\n"
        "who = !hostname\n"
        "print('rank', dist.get_rank(), 'sum', t.item())\n"
        "{'sum': t.item(), 'double': double(21), 'host_ok': len(who) == 1}\n")
    assert r["status"] == "ok", kernel.text(r)
    results = [o for o in r["outputs"] if o["output_type"] == "execute_result"]
    assert results and "'sum': 3.0" in results[0]["data"]["text/plain"]
    assert "'double': 42" in results[0]["data"]["text/plain"] and "'host_ok': True" in results[0]["data"]["text/plain"]
    check = kernel.execute("assert answer == _ == {'sum': 3.0, 'double': 42, 'host_ok': True}; print('ok')")
    assert check["status"] == "ok", kernel.text(check)


def test_widget_is_replaced_by_the_run_report(kernel):
    r = kernel.execute("%%distribute -n 2\nimport jupyter_torchdist as jt\n"
                       "for i in range(3):\n    jt.report(step=i + 1, total=3, loss=1.0 / (i + 1))\n"
                       "print('hello from', jt.rank())\n'done'")
    assert r["status"] == "ok", kernel.text(r)
    reports = [o for o in r["outputs"] if "application/vnd.jupyter-torchdist.run+json" in o.get("data", {})]
    assert len(reports) == 1
    snap = reports[0]["data"]["application/vnd.jupyter-torchdist.run+json"]
    assert snap["status"] == "succeeded" and [x["state"] for x in snap["ranks"]] == ["done", "done"]
    assert [x["step"] for x in snap["ranks"]] == [3, 3]
    assert any("hello from 1" in line for _, line in snap["ranks"][1]["log_tail"])
    assert "text/html" in reports[0]["data"] and "text/plain" in reports[0]["data"]
    assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in r["outputs"])


def test_failure_names_rank_with_cell_lines_and_kernel_survives(kernel):
    r = kernel.execute("%%distribute -n 2\nimport torch.distributed as dist\nx = 1\n"
                       "if dist.get_rank() == 1:\n    raise KeyError('missing-thing')\n"
                       "dist.barrier()\nx")
    assert r["status"] == "error"
    assert r["error"]["ename"] == "RunFailed"
    text = _ansi_free("\n".join(r["error"]["traceback"]))
    assert "rank 1" in text and "KeyError: 'missing-thing'" in text
    assert "line 5" in text and "raise KeyError('missing-thing')" in text  # the cell's own line
    assert f'File "Cell In[{r["execution_count"]}]", line 5' in text  # ... in the cell's own prompt number
    assert "py4j" not in text and "pyspark" not in text
    again = kernel.execute("1 + 1")
    assert again["status"] == "ok"


def test_interrupt_stops_the_run_and_the_kernel_stays(kernel):
    r = kernel.execute("%%distribute -n 2\nimport time\nwhile True:\n    time.sleep(0.1)\n",
                       interrupt_after=6.0, timeout=60)
    assert r["status"] == "error" and r["error"]["ename"] == "RunInterrupted", kernel.text(r)
    assert r["seconds"] < 6.0 + 30  # generous: CI machines can be loaded
    assert kernel.execute("print('still here')")["status"] == "ok"


def test_timeout_option(kernel):
    r = kernel.execute("%%distribute -n 2 --timeout 3\nimport time\ntime.sleep(60)\n", timeout=60)
    assert r["status"] == "error" and r["error"]["ename"] == "RunTimeout"
    assert "still running" in r["error"]["evalue"]
    assert r["seconds"] < 3 + 30


def test_usage_errors_are_short(kernel):
    r = kernel.execute("%%distribute -n zero\n1")
    text = kernel.text(r)
    assert r["status"] == "error" and "UsageError" in text and "-n" in text
    assert "Traceback" not in text  # IPython shows usage errors as one message


def test_a_fresh_notebook_starts_quietly_and_shares_the_embedded_session():
    """The embedded session's JVM chatter stays out of the cells, and the notebook's DataFrames use it."""
    k = Kernel(extra_env={"JUPYTER_TORCHDIST_WARMUP": "1"})  # as a user gets it: warm-up in the background
    try:
        cells = ["%load_ext jupyter_torchdist",
                 "import jupyter_torchdist as jt\njt.spark_session()",  # the DataFrames' session, started when asked
                 "from pyspark.sql import SparkSession\nspark = SparkSession.getActiveSession()\n"
                 "print(spark is not None, spark.range(10).count())",
                 "%%distribute -n 2\nimport torch.distributed as dist\ndist.get_world_size()"]
        results = [k.execute(c, timeout=240) for c in cells]
        assert [r["status"] for r in results] == ["ok"] * 4, [k.text(r) for r in results]
        assert "True 10" in k.text(results[2])
        streams = "".join(o["text"] for r in results for o in r["outputs"] if o["output_type"] == "stream")
        for noise in ("Using incubator modules", "log4j", "Setting default log level", "NativeCodeLoader",
                      "Setting Spark log level"):
            assert noise not in streams, streams[-2000:]
        log = k.execute("from jupyter_torchdist.launchers.session.embedded import session_log\nprint(session_log())")
        assert "jupyter-torchdist-spark-" in k.text(log)
    finally:
        pid = k.pid
        k.shutdown()
        assert pid is None or not descendants_of(pid), "processes outlived the kernel"
