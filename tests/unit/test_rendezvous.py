"""Unit: the kernel's rendezvous plan (MASTER_ADDR/PORT, LOCAL_RANK, GROUP_RANK)."""
import pytest

from jupyter_torchdist.rendezvous import plan_rendezvous


def test_single_host():
    hellos = {0: {"host": "a", "ip": "127.0.0.1", "store_port": 5000}, 1: {"host": "a", "ip": "127.0.0.1"}}
    plan = plan_rendezvous(hellos, 2)
    assert plan[1] == {"t": "rendezvous", "master_addr": "127.0.0.1", "master_port": 5000, "local_rank": 1,
                       "local_world_size": 2, "group_rank": 0, "num_hosts": 1}


def test_two_hosts_interleaved():
    hellos = {0: {"host": "a", "ip": "10.0.0.1", "store_port": 7}, 1: {"host": "b", "ip": "10.0.0.2"},
              2: {"host": "a", "ip": "10.0.0.1"}, 3: {"host": "b", "ip": "10.0.0.2"}}
    plan = plan_rendezvous(hellos, 4)
    assert [plan[r]["local_rank"] for r in range(4)] == [0, 0, 1, 1]
    assert [plan[r]["group_rank"] for r in range(4)] == [0, 1, 0, 1]
    assert {plan[r]["local_world_size"] for r in range(4)} == {2}
    assert all(plan[r]["master_addr"] == "10.0.0.1" for r in range(4))


def test_incomplete_hellos_refused():
    with pytest.raises(ValueError):
        plan_rendezvous({0: {"host": "a", "ip": "x", "store_port": 1}}, 2)
    with pytest.raises(ValueError, match="store port"):
        plan_rendezvous({0: {"host": "a", "ip": "x"}}, 1)
