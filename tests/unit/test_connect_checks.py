"""The Connect backend's checks before anything is submitted: old servers, dynamic allocation, the dial address."""
from __future__ import annotations

import pytest

from jupyter_torchdist.core.errors import LaunchError
from jupyter_torchdist.launchers import connect


class FakeConf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class FakeSession:
    def __init__(self, version: str = "4.3.0", **conf: str) -> None:
        self.version = version
        self.conf = FakeConf({k.replace("_", "."): v for k, v in conf.items()})


def test_a_server_too_old_for_barrier_map_in_arrow_names_the_version_needed():
    with pytest.raises(LaunchError, match=r"Spark 3\.4\.1: .*needs Spark 3\.5 or newer"):
        connect._check_server(FakeSession("3.4.1"), local=True)
    connect._check_server(FakeSession("3.5.0"), local=True)
    connect._check_server(FakeSession("4.3.0"), local=False)


def test_dynamic_allocation_on_a_cluster_is_refused_with_the_setting():
    with pytest.raises(LaunchError, match="spark.dynamicAllocation.enabled=false"):
        connect._check_server(FakeSession(spark_dynamicAllocation_enabled="true"), local=False)
    connect._check_server(FakeSession(spark_dynamicAllocation_enabled="true"), local=True)  # local masters allow it


def test_the_advertised_address_takes_a_host_or_a_host_and_port(monkeypatch):
    monkeypatch.delenv(connect.CHANNEL_ADVERTISE_ENV, raising=False)
    assert connect._advertised(FakeSession()) is None
    key = connect.CHANNEL_ADVERTISE_CONF
    session = FakeSession()
    session.conf.values[key] = "203.0.113.7:40123"
    assert connect._advertised(session) == ("203.0.113.7", 40123)
    session.conf.values[key] = "gateway.example"
    assert connect._advertised(session) == ("gateway.example", None)
    monkeypatch.setenv(connect.CHANNEL_ADVERTISE_ENV, "[2001:db8::1]:5000")
    assert connect._advertised(session) == ("2001:db8::1", 5000)


def test_the_channel_host_setting_wins_over_the_guess(monkeypatch):
    monkeypatch.delenv(connect.CHANNEL_HOST_ENV, raising=False)
    session = FakeSession()
    assert connect.channel_host(session, "localhost", local_master=True) == "127.0.0.1"
    session.conf.values[connect.CHANNEL_HOST_CONF] = "10.1.2.3"
    assert connect.channel_host(session, "localhost", local_master=True) == "10.1.2.3"
    monkeypatch.setenv(connect.CHANNEL_HOST_ENV, "10.9.9.9")
    assert connect.channel_host(session, "localhost", local_master=True) == "10.9.9.9"


def test_a_barrier_slot_shortage_from_the_server_is_translated_and_other_errors_pass_through():
    said = connect._describe(RuntimeError("org.apache.spark.scheduler.BarrierJobSlotsNumberCheckFailed: [x]"))
    assert said.startswith("the Spark Connect server could not give every rank a task slot") and "x" in said
    assert connect._describe(RuntimeError("something else entirely")) == "something else entirely"


def test_with_no_server_host_the_guess_is_this_machines_own_address(monkeypatch):
    monkeypatch.delenv(connect.CHANNEL_HOST_ENV, raising=False)
    import socket

    assert connect.channel_host(FakeSession(), "", local_master=False) == socket.gethostbyname(socket.gethostname())
