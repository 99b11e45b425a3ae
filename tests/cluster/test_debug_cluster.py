"""Debugging on a real standalone cluster: ranks in executor JVMs say where they are when --timeout stops a
rank-divergent collective, and a breakpoint() on one of them is answered from the notebook."""
from __future__ import annotations

import pytest

from ..kernel.test_debug_kernel import BREAK, HANG
from ..support.kernel import Kernel
from .test_cluster import driver  # noqa: F401  (the fixture: a kernel whose session is the cluster's)

pytestmark = [pytest.mark.spark, pytest.mark.cluster]


def test_places_on_timeout_and_pdb_on_a_rank_in_an_executor(driver):  # noqa: F811
    kernel: Kernel = driver[0]
    r = kernel.execute(HANG.format(opts="--timeout 25").replace(" --local", ""), timeout=240)
    text = kernel.text(r)
    assert r["error"]["ename"] == "RunTimeout" and "spark://" in text, text
    assert "rank 0: waiting in all_reduce at cell line 6 for " in text
    assert "rank 1: in time.sleep at cell line 8" in text
    r = kernel.execute(BREAK.replace(" --local", ""), answers=["p x", "c"], timeout=240)
    assert r["status"] == "ok" and r["prompts"] == ["rank 1 (Pdb) "] * 2, kernel.text(r)
    streams = "".join(o.get("text", "") for o in r["outputs"] if o["output_type"] == "stream")
    assert "\n11\n" in streams and "-> t = torch.tensor([float(x)])" in streams
    assert [o["data"]["text/plain"] for o in r["outputs"] if o["output_type"] == "execute_result"] == ["21.0"]
