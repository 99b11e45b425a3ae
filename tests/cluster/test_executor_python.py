"""The executors' Python, checked before any rank runs: the session's ``spark.pyspark.python`` is honoured in a
notebook kernel (pyspark itself only reads PYSPARK_PYTHON), a Python that cannot run ranks is named with what to
set, and one whose packages differ from the kernel's is refused by name (real kernels on the shared cluster)."""
from __future__ import annotations

import sys

import pytest

from ..support import ROOT
from ..support.cluster import kernel_on

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

ALL_REDUCE = "import torch, torch.distributed as dist\nt = torch.ones(1)\ndist.all_reduce(t)\nt.item()"


def _run(cluster, conf: dict[str, str], cell: str = f"%%distribute -n 2\n{ALL_REDUCE}") -> tuple[dict, str]:
    kernel = kernel_on(cluster, conf, pyspark_python=False)
    try:
        r = kernel.execute(cell, timeout=180)
        return r, kernel.text(r)
    finally:
        kernel.shutdown()  # its cores go back to the cluster for the next test's kernel


def test_the_sessions_pyspark_python_is_honoured_in_a_notebook_kernel(cluster):
    r, text = _run(cluster, {"spark.pyspark.python": sys.executable})
    assert r["status"] == "ok" and "2.0" in text, text + cluster.logs()


def test_a_python_without_the_package_is_named_with_what_to_set(cluster):
    r, text = _run(cluster, {"spark.pyspark.python": "/usr/bin/python3"})
    assert r["status"] == "error", text
    assert "the executors' Python (/usr/bin/python3 on the executors at 127.0.0.1) could not import" in text, text
    assert "PYSPARK_PYTHON" in text and "spark.pyspark.python" in text
    assert r["seconds"] < 30


def test_an_executor_whose_packages_differ_is_refused_by_name(cluster, tmp_path):
    # The executors' cloudpickle says it is 9.9.9 (a distribution record first on their path), the kernel's is not.
    record = tmp_path / "cloudpickle-9.9.9.dist-info"
    record.mkdir()
    (record / "METADATA").write_text("Metadata-Version: 2.1\nName: cloudpickle\nVersion: 9.9.9\n")
    r, text = _run(cluster, {"spark.pyspark.python": sys.executable,
                             "spark.executorEnv.PYTHONPATH": f"{tmp_path}:{ROOT}"})
    assert r["status"] == "error", text
    assert "this executor's Python differs from the kernel's (cloudpickle 9.9.9 here" in text, text
    assert f"it ran {sys.executable} on" in text and r["seconds"] < 30
