"""Unit: the kernel's rendezvous plan (MASTER_ADDR/PORT, LOCAL_RANK, GROUP_RANK, and under --gpu the GPUs each rank
sees: the placement rule of gpus.py)."""
import pytest

from jupyter_torchdist.core.rendezvous import plan_rendezvous


def test_single_host():
    hellos = {0: {"host": "a", "ip": "127.0.0.1", "store_port": 5000}, 1: {"host": "a", "ip": "127.0.0.1"}}
    plan = plan_rendezvous(hellos, 2)
    assert plan[1] == {"t": "rendezvous", "master_addr": "127.0.0.1", "master_port": 5000, "local_rank": 1,
                       "local_world_size": 2, "group_rank": 0, "num_hosts": 1, "gpus": [], "host_ranks": 2}


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


def _gpu_hello(rank: int, host: str, gpu: str, scope: str = "0,1,2,3|*|*") -> dict:
    hello = {"host": host, "ip": f"10.0.0.{ord(host[0])}", "gpu": gpu, "scope": scope}
    return {**hello, "store_port": 7} if rank == 0 else hello


def test_the_ranks_of_a_host_see_each_others_gpus_and_local_rank_indexes_their_own():
    """Spark gave tasks 0-3 of one host GPUs 2, 0, 3, 1: each rank sees all four, its own at LOCAL_RANK."""
    hellos = {r: _gpu_hello(r, "a", gpu) for r, gpu in enumerate(["2", "0", "3", "1"])}
    plan = plan_rendezvous(hellos, 4)
    for rank in range(4):
        assert plan[rank]["gpus"] == ["2", "0", "3", "1"]
        assert plan[rank]["gpus"][plan[rank]["local_rank"]] == hellos[rank]["gpu"]


def test_two_hosts_of_two_gpus_each_see_only_their_own_hosts_gpus():
    hellos = {0: _gpu_hello(0, "a", "1"), 1: _gpu_hello(1, "b", "0"), 2: _gpu_hello(2, "a", "0"),
              3: _gpu_hello(3, "b", "1")}
    plan = plan_rendezvous(hellos, 4)
    assert [plan[r]["gpus"] for r in range(4)] == [["1", "0"], ["0", "1"], ["1", "0"], ["0", "1"]]
    assert [plan[r]["local_rank"] for r in range(4)] == [0, 0, 1, 1]


def test_ranks_that_cannot_open_each_others_gpus_see_only_their_own_as_device_0():
    """Containers on one host that isolate devices (each opens only its GPU): pyspark's TorchDistributor's layout."""
    hellos = {r: _gpu_hello(r, "a", "0", scope=f"{r}|*|{r}") for r in range(3)}
    plan = plan_rendezvous(hellos, 3)
    assert [(plan[r]["gpus"], plan[r]["local_rank"], plan[r]["local_world_size"]) for r in range(3)] == \
        [(["0"], 0, 1)] * 3
    assert [plan[r]["group_rank"] for r in range(3)] == [0, 1, 2] and plan[0]["num_hosts"] == 3


def test_uuids_are_kept_as_spark_named_them():
    hellos = {0: _gpu_hello(0, "a", "GPU-8f2c"), 1: _gpu_hello(1, "a", "GPU-11aa")}
    assert plan_rendezvous(hellos, 2)[1]["gpus"] == ["GPU-8f2c", "GPU-11aa"]


def test_two_ranks_of_a_host_on_one_gpu_are_refused_naming_them():
    hellos = {0: _gpu_hello(0, "a", "0"), 1: _gpu_hello(1, "a", "0")}
    with pytest.raises(ValueError, match="ranks 0 and 1 on a were both given GPU 0.*below 1"):
        plan_rendezvous(hellos, 2)
    hellos[1]["gpu"] = ""
    with pytest.raises(ValueError, match="rank 1 on a has no GPU"):
        plan_rendezvous(hellos, 2)
