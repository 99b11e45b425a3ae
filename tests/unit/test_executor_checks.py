"""Unit: what a rank checks of its host before it runs (its Python's versions, the interface its collectives use)
and how the kernel words an executor whose Python cannot run ranks."""
from __future__ import annotations

import socket

from jupyter_torchdist.core import travel as _versions
from jupyter_torchdist.kernel.state.rank import RankState
from jupyter_torchdist.launchers.spark_jobs import explain_worker_python
from jupyter_torchdist.rank import group as interfaces


def test_versions_compare_python_and_packages_and_say_what_differs():
    here = _versions.local_versions()
    assert set(here) == {"python", "torch", "cloudpickle", "jupyter-torchdist"} and "+" not in here["torch"]
    assert _versions.differences(here, here) == [] and _versions.unfit(tuple(here.items())) is None
    assert _versions.unfit(()) is None  # a plan from a kernel that does not say: nothing to compare
    kernel = {**here, "torch": "1.0.0"}
    assert _versions.differences(kernel, here) == [f"torch {here['torch']} here, 1.0.0 in the kernel"]
    why = _versions.unfit(tuple(kernel.items()))
    assert why is not None and "torch" in why and socket.gethostname() in why and "PYSPARK_PYTHON" in why


def test_the_interface_is_the_one_holding_the_address_and_a_users_choice_stands(monkeypatch):
    assert interfaces.interface_of("127.0.0.1") == "lo"
    assert interfaces.interface_of("198.19.255.254") is None and interfaces.interface_of("::1") is None
    for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):  # set, then removed: undone to what it was
        monkeypatch.setenv(name, "unset")  # (a bare delenv of an absent name records nothing, and the "lo"
        monkeypatch.delenv(name)           # choose_interfaces sets would leak into later tests' workers)
    assert interfaces.choose_interfaces("127.0.0.1") == "lo"
    import os
    assert os.environ["GLOO_SOCKET_IFNAME"] == "lo" and os.environ["NCCL_SOCKET_IFNAME"] == "lo"
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth7")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib0")
    interfaces.choose_interfaces("127.0.0.1")
    assert os.environ["GLOO_SOCKET_IFNAME"] == "eth7" and os.environ["NCCL_SOCKET_IFNAME"] == "ib0"


def test_a_python_that_cannot_run_ranks_is_worded_with_what_to_set():
    spark = ("Job aborted due to stage failure: Lost task 0.3 in stage 0.0 (TID 3) (10.0.0.7 executor 1): "
             "org.apache.spark.SparkException: EOFException occurred while reading the port number from "
             "jupyter_torchdist._daemon's stdout.")
    said = explain_worker_python(spark, "python3")
    assert said.startswith("the executors' Python (python3 on 10.0.0.7) could not start jupyter_torchdist._daemon")
    assert "PYSPARK_PYTHON" in said and said.endswith(spark)
    said = explain_worker_python("ModuleNotFoundError: No module named 'torch'", "/usr/bin/python3", ["h1", "h2"])
    assert said.startswith("the executors' Python (/usr/bin/python3 on the executors at h1, h2) could not import torch")
    assert explain_worker_python("ZeroDivisionError: division by zero", "python3") == \
        "ZeroDivisionError: division by zero"


def test_a_rank_is_shown_by_name_and_address_unless_loopback():
    r = RankState(0)
    r.host, r.ip = "tdh1", "198.18.0.11"
    assert r.where == "tdh1 (198.18.0.11)"
    r.ip = "127.0.0.1"
    assert r.where == "tdh1"
    r.host, r.ip = "", "10.0.0.2"
    assert r.where == "10.0.0.2"


def test_an_inherited_loopback_interface_is_not_kept_for_a_rank_that_reaches_other_hosts(monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "lo")
    interfaces.choose_interfaces("198.19.255.254")  # an address no interface here holds: nothing to choose
    import os
    assert "GLOO_SOCKET_IFNAME" not in os.environ and "NCCL_SOCKET_IFNAME" not in os.environ
