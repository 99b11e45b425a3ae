"""%distribute SCRIPT ARGS (the line magic) in a real kernel: the run's report, a failing rank, and no process left
after the kernel."""
from __future__ import annotations

import os
import re
import time

import pytest

from ..support.kernel import Kernel
from ..support.procs import descendants_of
from ..support.script_project import make_project


@pytest.fixture
def project(tmp_path):
    return make_project(tmp_path)


def test_line_magic_runs_a_script_in_a_real_kernel(project):
    kernel = Kernel()
    try:
        assert kernel.execute("%load_ext jupyter_torchdist")["status"] == "ok"
        r = kernel.execute(f"%cd {project}\n%distribute -n 2 --local train.py --code 0")
        assert r["status"] == "ok", kernel.text(r)
        assert not [o for o in r["outputs"] if o["output_type"] == "execute_result"], "a script has no value"
        reports = [o["data"]["application/vnd.jupyter-torchdist.run+json"] for o in r["outputs"]
                   if "application/vnd.jupyter-torchdist.run+json" in o.get("data", {})]
        assert reports and reports[-1]["status"] == "succeeded" and reports[-1]["backend"] == "local"
        assert any("argv=['--code', '0']" in line for _, line in reports[-1]["ranks"][1]["log_tail"])
        r = kernel.execute("%distribute -n 2 --local train.py --exit-on 1 --code 3")
        assert r["status"] == "error" and r["error"]["ename"] == "RunFailed"
        text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(r["error"]["traceback"]))
        assert "rank 1" in text and "code 3" in text
        family = descendants_of(kernel.pid) if kernel.pid else set()
        assert family, "the kernel's zygote is its child"
    finally:
        kernel.shutdown()
    assert _all_gone(family), "the zygote, agents or ranks outlived the kernel"


def _all_gone(pids: set[int], within: float = 30.0) -> bool:
    end = time.monotonic() + within
    while any(os.path.exists(f"/proc/{p}") and _state(p) != "Z" for p in pids):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
