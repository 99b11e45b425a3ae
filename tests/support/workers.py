"""The tests in two workers (pytest-xdist's ``-n 2``, the README's test command): which tests must share one.

Most test modules are a unit of their own: a module's fixtures (a kernel, a JupyterLab) are built once, in the worker
that runs the module. Some things only one process may hold, and every module that uses one runs in the same worker:

- ``pool``: the pool of every notebook the tests run (``pool.py``, read by the modules whose tests are ``POOLED``): it
  runs once per process, so twice in two workers;
- ``cluster``, ``connect``: the session's standalone cluster and Spark Connect server (conftest's fixtures ``cluster``
  and ``connect_server``): one each, not one per worker;
- ``hosts``: the multi-host bench's bridge and network namespaces (``hosts.py``), which have fixed names.

The controller that hands out the units never imports a test module (that would import torch and pyspark there), so
a module's unit is read from its source: the names above, written where a module uses them. pytest-xdist's own
``--dist loadgroup`` would read ``xdist_group`` marks instead, but it renames node ids in a way pytest 9 no longer
honours (every test then counts as its own group); this scheduler is its ``loadscope`` with our units.
"""
from __future__ import annotations

import re
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


@cache
def unit_of(module: str) -> str:
    """The unit a test module's tests run in (its path relative to the repository, as in node ids)."""
    try:
        source = (ROOT / module).read_text()
    except OSError:
        return module
    return next((name for name, used in SHARED if used.search(source)), module)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``-n``: whole units to a worker, the units with the most tests first (xdist's ``loadscope``)."""
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid.split("::", 1)[0])

    return UnitScheduling(config, log)

