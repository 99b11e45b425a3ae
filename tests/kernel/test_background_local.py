"""Background runs in a real kernel with --local ranks: the notebook stays usable while ranks train, the handle's
value and error, an interrupt of another cell, stops that reach one run, kept cells taking turns, and a kernel
shut down with runs training that leaves no process behind."""
from __future__ import annotations

import json
import re
import time

import pytest

from ..support.kernel import Kernel
from ..support.procs import all_gone, descendants_of

MIME = "application/vnd.jupyter-torchdist.run+json"
TRAIN = ("%%distribute -n 2 --local --background{flags}\nimport time\n"
         "for i in range({steps}):\n    time.sleep(0.1)\n    jupyter_torchdist.report(step=i + 1, total={steps}, "
         "loss=1 / (i + 1))\n{value}")


@pytest.fixture(scope="module")
def kernel():
    k = Kernel({"JUPYTER_TORCHDIST_WARMUP": "0"})
    try:
        assert k.execute("%load_ext jupyter_torchdist\nimport jupyter_torchdist, jupyter_torchdist as jt")[
            "status"] == "ok"
        yield k
    finally:
        pid = k.pid
        k.shutdown()
        assert pid is None or not descendants_of(pid)


def _plain(r: dict) -> str:
    """The cell's value as text: its result, or the handle a background cell shows (a display it keeps up to date)."""
    return next((o["data"]["text/plain"] for o in r["outputs"] if o["output_type"] == "execute_result"
                 or o.get("data", {}).get("text/plain", "").startswith(("<Run ", "<Sweep "))), "")


def _clean(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_a_background_run_trains_while_other_cells_run_and_its_view_becomes_the_report(kernel):
    started = kernel.execute(TRAIN.format(flags=" -o out", steps=30, value="'the value'"))
    assert started["status"] == "ok", kernel.text(started)
    assert re.match(r"<Run (\d+) \([0-9a-f]{12}\) %%distribute -n 2 --local --background -o out: (queued|running)>",
                    _plain(started)), _plain(started)   # its number in the kernel, its durable id
    number = int(re.search(r"<Run (\d+)", _plain(started)).group(1))
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in started["outputs"])
    meanwhile = kernel.execute("1 + 1")
    assert _plain(meanwhile) == "2"
    assert kernel.text(kernel.execute("print(jt.runs()[-1].state)")).strip() == "running"  # it was not waited for
    seen: list[dict] = []
    waited = kernel.execute("%distribute_wait", watch=seen.append)
    assert _plain(waited) == "'the value'", kernel.text(waited)
    updates = [m["content"]["data"][MIME] for m in seen if m["msg_type"] == "update_display_data"
               and MIME in m["content"]["data"]]
    assert updates and updates[-1]["status"] == "succeeded" and updates[-1]["background"] is True
    assert updates[-1]["run_id"] == number and updates[-1]["ranks"][0]["step"] == 30
    r = kernel.execute("print(out, jt.runs()[-1].state, jt.last_run().value)")
    assert kernel.text(r).strip() == "the value done the value"


def test_a_background_failure_raises_from_result_with_the_cells_own_lines(kernel):
    started = kernel.execute("%%distribute -n 2 --local --background\nimport torch.distributed as dist\n"
                             "if dist.get_rank() == 1:\n    raise KeyError('no such key')\n0")
    r = kernel.execute("run = jt.runs()[-1]\nrun.wait(60)\nprint(run.state)")
    assert kernel.text(r).strip() == "failed"
    r = kernel.execute("run.result()")
    text = _clean(kernel.text(r))
    assert r["status"] == "error" and r["error"]["ename"] == "RunFailed"
    assert "rank 1" in text and "KeyError: 'no such key'" in text
    assert f'File "Cell In[{started["execution_count"]}]", line 4' in text, text


def test_the_kernels_interrupt_stops_the_cell_running_never_the_background_run(kernel):
    kernel.execute(TRAIN.format(flags="", steps=40, value="'survived'"))
    r = kernel.execute("import time\ntime.sleep(60)", interrupt_after=1.0, timeout=30)
    assert r["status"] == "error" and r["error"]["ename"] == "KeyboardInterrupt"
    assert kernel.text(kernel.execute("print(jt.runs()[-1].state)")).strip() == "running"
    r = kernel.execute("%distribute_wait", interrupt_after=0.5, timeout=30)  # an interrupted wait: the run goes on
    assert r["status"] == "error" and "goes on" in kernel.text(r)
    assert _plain(kernel.execute("jt.runs()[-1].result(timeout=60)")) == "'survived'"


def test_two_runs_at_once_one_stopped_and_its_ranks_gone(kernel):
    forever = "%%distribute -n 2 --local --background\nimport os, time\njupyter_torchdist.report(pid=os.getpid())\n" \
              "while True:\n    time.sleep(0.05)"
    kernel.execute(forever)
    kernel.execute(TRAIN.format(flags="", steps=20, value="'second'"))
    r = kernel.execute("first, second = jt.runs()[-2:]\nimport time\nt0 = time.time()\n"
                       "while first.state != 'running' and time.time() - t0 < 30: time.sleep(0.1)\ntime.sleep(2)\n"
                       "print(first.stop(), first.wait(30), first.state, second.state)")
    assert kernel.text(r).split() == ["True", "True", "stopped", "running"], kernel.text(r)
    r = kernel.execute("import json\nprint(json.dumps([x.metrics.get('pid') for x in first.details.state.ranks]))\n"
                       "print(first.error.headline)")
    pids_line, headline = kernel.text(r).strip().splitlines()
    assert headline == "stopped by run.stop(): every rank was stopped"
    assert all_gone([p for p in json.loads(pids_line) if p])
    assert _plain(kernel.execute("second.result(timeout=60)")) == "'second'"


def test_kept_cells_in_the_background_take_turns_never_interleaved(kernel):
    r = kernel.execute("%%distribute -n 2 --local --keep --background\nimport time\nlog = []\n"
                       "for i in range(20):\n    time.sleep(0.1)\nlog.append('first')\nlen(log)")
    assert r["status"] == "ok" and "<Run" in _plain(r)
    seen: list[dict] = []
    r = kernel.execute("%%distribute --local --keep\nlog.append('second')\nlog", watch=seen.append, timeout=120)
    first = kernel.text(kernel.execute("print(jt.runs()[-2], jt.runs()[-2].error)"))
    assert _plain(r) == "['first', 'second']", f"the background cell: {first}\n{kernel.text(r)}"
    queued = [n for m in seen if m["msg_type"] in ("comm_open", "comm_msg")
              for n in m["content"]["data"].get("state", {}).get("snapshot", {}).get("notices", [])]
    assert any(n.startswith("queued: waiting for the kept ranks: run ") for n in queued), queued
    kernel.execute("%distribute_stop")


def test_a_kernel_shut_down_with_runs_training_leaves_no_process():
    k = Kernel({"JUPYTER_TORCHDIST_WARMUP": "0"})
    try:
        assert k.execute("%load_ext jupyter_torchdist")["status"] == "ok"
        for _ in range(2):
            k.execute("%%distribute -n 2 --local --background\nimport time\nwhile True:\n    time.sleep(0.05)")
        r = k.execute("import jupyter_torchdist as jt, time\nt0 = time.time()\n"
                      "while any(r.state != 'running' for r in jt.runs()) and time.time() - t0 < 30: time.sleep(0.1)\n"
                      "print([r.state for r in jt.runs()])")
        assert kernel_text(k, r) == "['running', 'running']"
        deadline = time.monotonic() + 60
        while len(descendants_of(k.pid)) < 9 and time.monotonic() < deadline:
            time.sleep(0.2)  # the process server, and an agent and a rank per rank of each run
        pids = descendants_of(k.pid)
        assert len(pids) >= 9, pids
    finally:
        k.kc.stop_channels()
        k.km.shutdown_kernel(now=False)  # a shutdown request, as a front end's Shut Down sends
    assert all_gone(pids), f"left behind: {[p for p in pids if all_gone([p], 0.01) is False]}"


def kernel_text(k: Kernel, r: dict) -> str:
    return k.text(r).strip()
