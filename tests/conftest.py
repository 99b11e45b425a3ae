"""Fixtures for every layer, the layers themselves, and what travels to the ranks.

The tests are grouped by what they need (see the README's Development section):

- ``unit/``: nothing beyond this process and plain subprocesses (no Spark JVM, no kernel, no ranks, no browser);
- ``ranks/``: real rank processes (``--local`` and the embedded local Spark session);
- ``kernel/``: real Jupyter kernels and notebooks executed with nbclient;
- ``cluster/``: the Spark standalone cluster on loopback;
- ``browser/``: JupyterLab and Notebook 7 in Chromium.

Everything outside ``unit/`` is marked ``slow`` (so is a unit test marked so itself), except a test marked ``quick``:
``-m "not slow"`` is the quick subset. The layers run in that order, unit first. One embedded SparkSession serves
the whole test session, started by the first test that asks for it.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from .support.workers import pytest_xdist_make_scheduler  # noqa: F401  (-n: the worker groups, support/workers.py)

os.environ.setdefault("JUPYTER_TORCHDIST_WARMUP", "0")

import cloudpickle

from .support import fault_helpers, helpers
from .support.cluster import FAST_JVM

# Every test JVM as the clusters' (support/cluster.py's FAST_JVM: no optimising JIT, the serial collector, the
# archive of Spark's classes): a Spark driver started by spark-submit (the embedded sessions of this process and of
# every kernel, the sessions notebooks build, the Connect server) reads it. Measured on the 2-core machine, a local
# session's start and first two jobs: 21.0 s with the default JIT, 18.8 s without (two runs each); from the archive
# about half that (benchmarks/bench_class_archive.py). Short-lived JVMs spend their first seconds compiling and
# loading classes; the tests' never live long.
os.environ.setdefault("SPARK_SUBMIT_OPTS", FAST_JVM)

from .support.procs import children

# The ranks cannot import the tests package: the rank functions of these modules travel by value.
cloudpickle.register_pickle_by_value(helpers)
cloudpickle.register_pickle_by_value(fault_helpers)

TESTS = Path(__file__).resolve().parent
LAYERS = ("unit", "ranks", "kernel", "cluster", "browser")


def layer_of(path: Path) -> str | None:
    """The layer folder a test file is in (None for a file directly under tests/)."""
    parts = Path(path).resolve().relative_to(TESTS).parts
    return parts[0] if len(parts) > 1 and parts[0] in LAYERS else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if layer_of(item.path) != "unit" and not item.get_closest_marker("quick"):
            item.add_marker(pytest.mark.slow)
    order = {name: i for i, name in enumerate(LAYERS)}
    items.sort(key=lambda item: order.get(layer_of(item.path) or "", len(LAYERS)))  # stable: files keep their order


# -- Spark ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def spark():
    """The embedded local SparkSession the magic itself would start (4 slots), stopped at the end."""
    pytest.importorskip("pyspark")
    from jupyter_torchdist.launchers.session import embedded as backend

    session, embedded = backend.get_session()
    assert embedded
    yield session
    backend.stop_embedded_session()


@pytest.fixture(params=["local", pytest.param("spark", marks=pytest.mark.spark)])
def backend(request: pytest.FixtureRequest) -> str:
    """The launcher a test runs its ranks with: ``local=backend == "local"`` (Spark: the embedded session)."""
    if request.param == "spark":
        request.getfixturevalue("spark")
    return request.param


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """A running standalone cluster (support/cluster.py): a Cluster, stopped with all its processes at the end."""
    pytest.importorskip("pyspark")
    from .support.cluster import start

    yield from _serving(start(tmp_path_factory.mktemp("spark-cluster")), "cluster")


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory):
    """A running Spark Connect server (support/connect_server.py): its record (``url`` is the sc:// address),
    stopped with all its processes at the end."""
    from .support.connect_server import start_server

    yield from _serving(start_server(tmp_path_factory.mktemp("spark-connect")), "Spark Connect server")


def _serving(c, what: str):
    """Yield a started cluster or server; stop it at the end, with every process it spawned."""
    from .support.cluster import stop

    try:
        yield c
    finally:
        survivors = stop(c)
        assert not survivors, f"{what} processes survived the teardown: {survivors}"


# -- processes, shells, servers ------------------------------------------------------------------------------
@pytest.fixture
def descendants():
    return children


@pytest.fixture
def shell():
    """An in-process IPython shell with the extension loaded; the singleton is cleared afterwards so
    later tests do not find a stray shell through get_ipython()."""
    from IPython.core.interactiveshell import InteractiveShell

    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "jupyter_torchdist")
    try:
        yield sh
    finally:
        sh.run_line_magic("unload_ext", "jupyter_torchdist")
        InteractiveShell.clear_instance()


@pytest.fixture
def server():
    """A live-channel server for 4 ranks with a small frame limit (the channel tests' peer is the test)."""
    from jupyter_torchdist.channel.server import ChannelServer

    s = ChannelServer(4, max_frame=1 << 16)
    yield s
    s.close()
