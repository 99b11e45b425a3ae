"""The tests in two workers (pytest-xdist's ``-n 2``, the README's test command): which tests share one, and when.

Most test modules are a unit of their own: a module's fixtures (a kernel, a JupyterLab) are built once, in the worker
that runs the module. Some things only one process may hold, and every module that uses one runs in the same worker:

- ``pool``: the pool of every notebook the tests run (``pool.py``, read by the modules whose tests are ``POOLED``): it
  runs once per process, so twice in two workers;
- ``cluster``, ``connect``: the session's standalone cluster and Spark Connect server (conftest's fixtures ``cluster``
  and ``connect_server``): one each, not one per worker;
- ``hosts``: the multi-host bench's bridge and network namespaces (``hosts.py``), which have fixed names.

A module that says ``SOLO = "why"`` measures how long the product takes against a bound that holds on a quiet
machine (a worker that joins late gets the ranks within 30 s, idle executors go back within their timeout): the solo
units run last, in one worker once the others have finished and left, so the bound is measured as a user's machine
would see it, not while another test's ranks and JVMs share the two cores.

The units go out longest first (the pool, then the cluster layer, the kernels and browsers, the ranks, the unit tests
last), so the two workers finish close together.

The controller that hands out the units never imports a test module (that would import torch and pyspark there), so
a module's unit is read from its source: the names above, written where a module uses them. pytest-xdist's own
``--dist loadgroup`` would read ``xdist_group`` marks instead, but it renames node ids in a way pytest 9 no longer
honours (every test then counts as its own group); this scheduler is its ``loadscope`` with our units.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from functools import cache
from typing import Any

import pytest

from . import ROOT

# (the unit's name, what in a module's source puts it there), the first match wins
SHARED: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("pool", re.compile(r"\bPOOLED\b")),
    ("hosts", re.compile(r"support\.hosts import")),
    ("cluster", re.compile(r"def \w+\([^)]*\bcluster\b")),
    ("connect", re.compile(r"def \w+\([^)]*\bconnect_server\b")),
)
_SOLO = re.compile(r"^SOLO = ", re.M)
SOLO_PREFIX = "solo:"
# the order units go out in: the longest first (a unit's layer is the folder its first module is in)
_FIRST = ("pool", "hosts", "cluster", "connect", "tests/cluster/", "tests/kernel/", "tests/browser/", "tests/ranks/",
          "tests/unit/")


@cache
def unit_of(module: str) -> str:
    """The unit a test module's tests run in (its path relative to the repository, as in node ids)."""
    try:
        source = (ROOT / module).read_text()
    except OSError:
        return module
    shared = next((name for name, used in SHARED if used.search(source)), None)
    if shared:
        return shared
    return SOLO_PREFIX + module if _SOLO.search(source) else module


def order(unit: str, tests: int) -> tuple[int, int, int]:
    """Sort key of a unit: solo units last, then by layer (longest first), then the most tests first."""
    solo = unit.startswith(SOLO_PREFIX)
    name = unit.removeprefix(SOLO_PREFIX)
    layer = next((i for i, first in enumerate(_FIRST) if name.startswith(first)), len(_FIRST))
    return (solo, layer, -tests)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``-n``: whole units to a worker, longest first, the solo units last and alone (xdist's ``loadscope``)."""
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid.split("::", 1)[0])

        def schedule(self) -> None:
            """loadscope's, with the units in our order (it sorts by test count alone)."""
            if self.collection is not None or not self._check_nodes_have_same_collection():
                super().schedule()
                return
            self.collection = list(next(iter(self.registered_collections.values())))
            units: dict[str, dict[str, bool]] = {}
            for nodeid in self.collection:
                units.setdefault(self._split_scope(nodeid), {})[nodeid] = False
            self.workqueue = OrderedDict(sorted(units.items(), key=lambda kv: order(kv[0], len(kv[1]))))
            for node in self.nodes:
                self._reschedule(node)

        def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
            super().mark_test_complete(node, item_index, duration)
            for other, work in list(self.assigned_work.items()):   # a worker held back while a solo unit waited
                if other is not node and self._pending_of(work) <= 1:
                    self._reschedule(other)

        def remove_node(self, node: Any) -> str | None:
            crashed = super().remove_node(node)
            for other in self.nodes:   # the other workers have gone: the solo units may go out now
                self._reschedule(other)
            return crashed

        def _reschedule(self, node: Any) -> None:
            """A worker runs a test only once it holds the next one (or is told to shut down): a worker with one
            test left is idle, holding it. So a solo unit goes to a worker once every other worker is idle that
            way: those are shut down (they run the test they hold, and leave), and the unit goes out when they
            have gone."""
            if not self.workqueue or node.shutting_down or not next(iter(self.workqueue)).startswith(SOLO_PREFIX):
                super()._reschedule(node)
                return
            if self._pending_of(self.assigned_work[node]) > 2:
                return
            others = {other: self._pending_of(work) for other, work in self.assigned_work.items() if other is not node}
            if any(pending >= 2 and not other.shutting_down for other, pending in others.items()):
                return   # another worker is still running tests of its own
            for other in others:
                if not other.shutting_down:
                    other.shutdown()
            if not others:
                super()._reschedule(node)

    return UnitScheduling(config, log)
