"""%%distribute --local in a real kernel: the value, the run report, an interrupt, and no Spark imported."""
from __future__ import annotations

from ..support.kernel import Kernel


def test_magic_in_a_real_kernel_value_view_interrupt_and_no_spark():
    kernel = Kernel({"JUPYTER_TORCHDIST_WARMUP": "0"})
    try:
        assert kernel.execute("%load_ext jupyter_torchdist")["status"] == "ok"
        r = kernel.execute("%%distribute -n 2 --local -o total\nimport torch, torch.distributed as dist\n"
                           "t = torch.tensor([dist.get_rank() + 1.0])\ndist.all_reduce(t)\nprint('rank says hi')\n"
                           "t.item()")
        assert r["status"] == "ok", kernel.text(r)
        assert [o["data"]["text/plain"] for o in r["outputs"] if o["output_type"] == "execute_result"] == ["3.0"]
        reports = [o["data"]["application/vnd.jupyter-torchdist.run+json"] for o in r["outputs"]
                   if "application/vnd.jupyter-torchdist.run+json" in o.get("data", {})]
        assert len(reports) == 1 and reports[0]["backend"] == "local" and reports[0]["status"] == "succeeded"
        assert ["stdout", "rank says hi"] in reports[0]["ranks"][1]["log_tail"]
        r = kernel.execute("%%distribute -n 2 --local\nimport time\nwhile True:\n    time.sleep(0.05)\n",
                           interrupt_after=3.0, timeout=60)
        assert r["status"] == "error" and r["error"]["ename"] == "RunInterrupted", kernel.text(r)
        assert r["seconds"] < 3.0 + 6
        r = kernel.execute("import sys; print(total, 'pyspark' in sys.modules, 'py4j' in sys.modules)")
        assert r["status"] == "ok" and "3.0 False False" in kernel.text(r)
    finally:
        kernel.shutdown()
