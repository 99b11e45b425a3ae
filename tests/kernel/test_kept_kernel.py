"""%%distribute --keep in a real IPython kernel: state across cells, the view, %distribute_stop, and the
kernel's end (shutdown, restart) taking every kept rank with it."""
from __future__ import annotations

import json
import re

import pytest

from ..support.procs import all_gone, descendants_of, process_alive
from ..support.kernel import Kernel, loaded_kernel

pytestmark = pytest.mark.spark

BUILD = ("%%distribute --keep -n 2\n"
         "import os, torch, torch.distributed as dist\n"
         "from torch.nn.parallel import DistributedDataParallel as DDP\n"
         "torch.manual_seed(0)\n"
         "model = DDP(torch.nn.Linear(4, 1))\n"
         "opt = torch.optim.SGD(model.parameters(), lr=lr)\n"
         "step = 0\n"
         "def train(k):\n"
         "    global step\n"
         "    for _ in range(k):\n"
         "        x = torch.randn(8, 4)\n"
         "        loss = model(x).pow(2).mean()\n"
         "        opt.zero_grad(); loss.backward(); opt.step(); step += 1\n"
         "        jupyter_torchdist.report(step=step, loss=loss)\n"
         "    return step\n"
         "os.getpid()\n")


def _value(kernel: Kernel, r: dict) -> str:
    assert r["status"] == "ok", kernel.text(r)
    results = [o for o in r["outputs"] if o["output_type"] == "execute_result"]
    return results[0]["data"]["text/plain"] if results else ""


def _kept_pids(kernel: Kernel) -> list[int]:
    r = kernel.execute("import jupyter_torchdist as jt, json\n"
                       "print(json.dumps([p for _, p in jt.kept().hosts.values()]))")
    return json.loads(kernel.text(r).strip().splitlines()[-1])


@pytest.fixture(scope="module")
def kernel():
    """One kernel for the tests below: each builds the model on the kept ranks again (BUILD runs on the ranks that
    are up), and none tests a fresh kernel (the kernel's end, at the bottom, starts its own)."""
    with loaded_kernel(setup="import jupyter_torchdist\nlr = 0.01") as k:
        yield k


def test_a_model_built_in_one_cell_trains_in_the_next_and_the_next(kernel):
    pid = _value(kernel, kernel.execute(BUILD, timeout=240))
    assert _value(kernel, kernel.execute("%%distribute --keep\ntrain(3)")) == "3"
    r = kernel.execute("%%distribute --keep -o steps --all-ranks\ntrain(2)\n(step, os.getpid())")
    assert _value(kernel, r) == f"[(5, {pid}), (5, {_kept_pids(kernel)[1]})]"
    assert kernel.text(kernel.execute("print(steps[0][0])")).strip() == "5"
    reports = [o for o in r["outputs"] if "application/vnd.jupyter-torchdist.run+json" in o.get("data", {})]
    assert reports, "each kept cell leaves its run report"
    snap = reports[-1]["data"]["application/vnd.jupyter-torchdist.run+json"]
    assert snap["status"] == "succeeded" and [x["step"] for x in snap["ranks"]] == [5, 5]
    assert any("kept ranks hold 2 Spark task slots" in n for n in snap["notices"])
    info = kernel.execute("import jupyter_torchdist as jt\nk = jt.kept()\nprint(k.n, k.cells, k.backend)")
    assert kernel.text(info).split()[:2] == ["2", "3"]  # this module's first test: the kept ranks' first cells


def test_a_failure_shows_the_cells_own_line_and_the_ranks_survive(kernel):
    _value(kernel, kernel.execute(BUILD, timeout=240))
    r = kernel.execute("%%distribute --keep\nx = 1\nif dist.get_rank() == 1:\n    raise KeyError('no such')\nx")
    text = re.sub(r"\x1b\[[0-9;]*m", "", kernel.text(r))
    assert r["status"] == "error" and "rank 1" in text and "KeyError: 'no such'" in text
    assert f'File "Cell In[{r["execution_count"]}]", line 4' in text, text
    assert "The kept ranks survived" in text
    assert _value(kernel, kernel.execute("%%distribute --keep\ntrain(1)")) == "1"


def test_an_interrupt_keeps_the_ranks_and_the_kernel_usable(kernel):
    _value(kernel, kernel.execute(BUILD, timeout=240))
    r = kernel.execute("%%distribute --keep\nimport time\nwhile True:\n    time.sleep(0.05)", interrupt_after=2.0)
    assert r["status"] == "error" and "RunInterrupted" in kernel.text(r) and "survived" in kernel.text(r)
    assert _value(kernel, kernel.execute("%%distribute --keep\nstep")) == "0"
    assert _value(kernel, kernel.execute("1 + 1")) == "2"


def test_distribute_stop_ends_every_rank_and_other_n_starts_new_ones(kernel):
    _value(kernel, kernel.execute(BUILD, timeout=240))
    pids = _kept_pids(kernel)
    r = kernel.execute("%%distribute --keep -n 3\nimport torch.distributed as dist\ndist.get_world_size()")
    assert _value(kernel, r) == "3" and "stopped the 2 kept ranks" in kernel.text(r) and "-n 3" in kernel.text(r)
    assert all_gone(pids)
    pids = _kept_pids(kernel)
    r = kernel.execute("%distribute_stop")
    assert "stopped the 3 kept ranks" in kernel.text(r) and "task slots are free" in kernel.text(r)
    assert all_gone(pids, within=10)
    assert "no kept ranks are up" in kernel.text(kernel.execute("%distribute_stop"))
    assert kernel.text(kernel.execute("import jupyter_torchdist as jt\nprint(jt.kept())")).strip() == "None"


@pytest.mark.parametrize("how", ["shutdown", "restart"])
def test_the_kernels_end_takes_the_kept_ranks_with_it(how):
    k = Kernel()
    try:
        assert k.execute("%load_ext jupyter_torchdist\nlr = 0.1")["status"] == "ok"
        _value(k, k.execute(BUILD, timeout=240))
        pids = _kept_pids(k)
        kernel_pid = k.pid
        assert all(process_alive(p) for p in pids)
        if how == "restart":
            k.km.restart_kernel(now=True)
            assert all_gone(pids) and all_gone([kernel_pid])
            assert not descendants_of(kernel_pid)
    finally:
        kernel_pid = k.pid
        k.shutdown()
    assert all_gone(pids) and (kernel_pid is None or not descendants_of(kernel_pid))
