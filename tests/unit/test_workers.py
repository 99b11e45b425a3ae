"""The units tests run in under ``-n 2`` (support/workers.py): whatever one process must hold is held by one."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from ..support import ROOT
from ..support.workers import order, pytest_xdist_make_scheduler, unit_of

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
    assert unit_of("tests/cluster/test_full_cluster.py") == "solo:tests/cluster/test_full_cluster.py"  # its own cluster
    assert unit_of("tests/kernel/test_connect.py") == "connect"
    assert unit_of("tests/cluster/test_multihost.py") == unit_of("tests/cluster/test_multihost_placement.py") == "hosts"


def test_any_other_module_is_a_unit_of_its_own() -> None:
    assert unit_of("tests/kernel/test_kept_kernel.py") == "tests/kernel/test_kept_kernel.py"
    assert unit_of("tests/unit/test_workers.py") == "tests/unit/test_workers.py"
    assert len({unit_of(m) for m in MODULES}) > len(MODULES) // 2


def test_the_modules_that_measure_bounds_on_a_quiet_machine_run_alone() -> None:
    solo = [m for m in MODULES if unit_of(m).startswith("solo:")]
    assert "tests/cluster/test_slot_wait.py" in solo and "tests/cluster/test_dynamic_allocation.py" in solo
    assert sorted(solo, key=lambda m: order(unit_of(m), 1))[0] in solo
    units = sorted({unit_of(m) for m in MODULES}, key=lambda u: order(u, 1))
    assert units[0] == "pool" and units[-len(solo):] == sorted(units[-len(solo):], key=lambda u: order(u, 1))
    assert all(u.startswith("solo:") for u in units[-len(solo):])


class _Node:
    """A worker as the scheduler sees it, and as pytest-xdist's worker behaves: it runs a test only once it holds the
    next one too (or has been told to shut down: then it runs all it holds, and leaves)."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.extend(indexes)

    def shutdown(self) -> None:
        self.shutting_down = True


def test_two_workers_get_the_longest_units_first_and_the_solo_units_once_the_other_has_left() -> None:
    ids = ["tests/unit/test_workers.py::a1", "tests/unit/test_workers.py::a2",
           "tests/cluster/test_slot_wait.py::b1", "tests/cluster/test_slot_wait.py::b2",
           "tests/cluster/test_full_cluster.py::f", "tests/kernel/test_kept_kernel.py::c",
           *(f"tests/cluster/test_cluster.py::d{i}" for i in (1, 2, 3)), "tests/kernel/test_docs_run.py::e"]
    config = SimpleNamespace(getvalue=lambda name: ["2*popen"] if name == "tx" else None)  # what `-n 2` sets
    sched = pytest_xdist_make_scheduler(config, None)
    a, b = _Node("gw0"), _Node("gw1")
    for node in (a, b):
        sched.add_node(node)
        sched.add_node_collection(node, ids)
    sched.schedule()
    done: list[str] = []
    gone: set[_Node] = set()
    SOLO = ("f", "b1", "b2")

    def name(i: int) -> str:
        return ids[i].split("::")[1]

    def step(node: _Node) -> bool:
        """The worker runs one test if it may; False when it cannot (idle, holding its last test, or gone)."""
        todo = [i for i in node.sent if name(i) not in done]
        if node in gone or not todo or (len(todo) < 2 and not node.shutting_down):
            if node.shutting_down and not todo and node not in gone:
                gone.add(node)
                sched.remove_node(node)
                return True
            return False
        if name(todo[0]) in SOLO:
            assert gone == {a, b} - {node}, "a solo test runs once the other worker has left"
        done.append(name(todo[0]))
        sched.mark_test_complete(node, todo[0])
        return True

    assert [name(i) for i in a.sent + b.sent] == ["e", "d1", "d2", "d3"]  # the pool, then the session's cluster
    while step(a) or step(b):
        pass
    assert gone == {a, b} and sorted(done) == sorted(name(i) for i in range(len(ids))), "every test ran, then all left"
    assert sorted(done[-3:]) == sorted(SOLO), done
