"""Unit: the standalone master's view of who holds its cores, in words (the JSON its web UI serves)."""
from __future__ import annotations

from jupyter_torchdist.launchers.session.master import _ui, describe_holders, who_holds_cores

STATE = {"cores": 4, "coresused": 4, "activeapps": [
    {"id": "app-1", "name": "alice-lab3", "user": "alice", "cores": 2, "starttime": 0},
    {"id": "app-2", "name": "bob-lab3", "user": "bob", "cores": 2, "starttime": 30 * 60000},
    {"id": "app-3", "name": "carol-lab3", "user": "carol", "cores": 0, "starttime": 50 * 60000},
]}


def test_the_holders_are_named_with_their_cores_and_how_long_and_ours_is_left_out():
    text = describe_holders(STATE, "app-3", 60 * 60000)
    assert text == ("the master says 4 of its 4 cores are in use; held by alice-lab3 (alice): 2 cores for 60 min, "
                    "bob-lab3 (bob): 2 cores for 30 min")
    assert describe_holders({"cores": 0}, None, 0) is None


def test_where_the_masters_ui_is_and_a_master_that_does_not_answer():
    assert _ui("spark://head:7077", {}) == "http://head:8080"
    assert _ui("spark://a:7077,b:7077", {}) == "http://a:8080"
    assert _ui("yarn", {}) is None and _ui("local[4]", {}) is None
    assert _ui("yarn", {"spark.jupyter_torchdist.master.ui": "http://m:9090/"}) == "http://m:9090"
    assert who_holds_cores("spark://127.0.0.1:7077", {"spark.jupyter_torchdist.master.ui": "http://127.0.0.1:9"},
                           None) is None  # nothing listens there: nothing said, at once
