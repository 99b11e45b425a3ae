"""The units tests run in under ``-n 2`` (support/workers.py): whatever one process must hold is held by one."""
from __future__ import annotations

from pathlib import Path

from ..support import ROOT
from ..support.workers import unit_of

THIS = str(Path(__file__).resolve().relative_to(ROOT))
MODULES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py"))


def _source(module: str) -> str:
    return (ROOT / module).read_text()


def test_every_module_that_reads_the_notebook_pool_runs_in_the_pools_unit() -> None:
    readers = [m for m in MODULES if m != THIS and
               ("support.pool import" in _source(m) or "execute_example" in _source(m))]
    assert len(readers) >= 10, readers
    assert {m: unit_of(m) for m in readers} == {m: "pool" for m in readers}


def test_the_session_servers_and_the_hosts_bench_each_have_one_unit() -> None:
    assert unit_of("tests/cluster/test_cluster.py") == "cluster"
    assert unit_of("tests/cluster/test_your_code.py") == "cluster"
    assert unit_of("tests/cluster/test_full_cluster.py") == "tests/cluster/test_full_cluster.py"  # a cluster of its own
    assert unit_of("tests/kernel/test_connect.py") == "connect"
    assert unit_of("tests/cluster/test_multihost.py") == unit_of("tests/cluster/test_multihost_placement.py") == "hosts"


def test_any_other_module_is_a_unit_of_its_own() -> None:
    assert unit_of("tests/kernel/test_kept_kernel.py") == "tests/kernel/test_kept_kernel.py"
    assert unit_of("tests/unit/test_workers.py") == "tests/unit/test_workers.py"
    assert len({unit_of(m) for m in MODULES}) > len(MODULES) // 2
