"""64 ranks on one host, in a real kernel, after other runs and usage errors: the run issue 10 reported
failing with "Gloo connectFullMesh failed ... Connection closed by peer" (ranks exited while peers still
needed their connections). Run after run, a trivial cell and a collective succeed."""
from __future__ import annotations

import pytest

from ..support.kernel import Kernel, loaded_kernel

pytestmark = pytest.mark.spark

TIMES: dict[str, list[float]] = {}


@pytest.fixture(scope="module")
def kernel():
    with loaded_kernel({"JUPYTER_TORCHDIST_WARMUP": "1"}) as k:
        yield k


def _value(kernel: Kernel, code: str) -> str:
    r = kernel.execute(code, timeout=300)
    assert r["status"] == "ok", kernel.text(r)
    TIMES.setdefault(code.splitlines()[0] + " / " + code.splitlines()[-1], []).append(r["seconds"])
    results = [o for o in r["outputs"] if o["output_type"] == "execute_result"]
    return results[0]["data"]["text/plain"] if results else ""


def test_64_ranks_after_other_runs_and_usage_errors_run_after_run(kernel):
    assert _value(kernel, "%%distribute -n 2 --quiet\n1") == "1"
    for bad in ("%%distribute -n 0\n1", "%%distribute --nprocs two\n1"):
        assert kernel.execute(bad)["status"] == "error"
    assert _value(kernel, "%%distribute -n 64 --quiet\n1") == "1"
    assert _value(kernel, "%%distribute -n 64 --quiet\nimport torch, torch.distributed as dist\n"
                          "t = torch.ones(1)\ndist.all_reduce(t)\nt.item()") == "64.0"
    print({k: [round(s, 1) for s in v] for k, v in TIMES.items()})
