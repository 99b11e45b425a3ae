"""A sweep's study file (kernel/sweeps/study.py): members kept as they were (an earlier release's records read in
today's words), another sweep's file refused (its space, search, metric, seed or early-stopping rule changed), a
file two live kernels share (numbers given out once, each kernel's unfinished members left to it while it beats,
taken over once when it is gone), the random order's seed kept, and a commit folder per member."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from jupyter_torchdist.core.errors import LaunchError
from jupyter_torchdist.kernel.sweeps.study import Member, commit_folder, open_study

SIGNATURE = {"space": "lr=[1, 2]", "search": "grid", "metric": "loss", "mode": "min", "seed": None,
             "early_stop": "asha", "grace": 3, "reduction_factor": 4, "max_steps": None, "metric_reduce": None}


def test_a_study_keeps_its_members_as_they_were(tmp_path):
    path = str(tmp_path / "s.db")
    store = open_study(path, SIGNATURE)
    member = Member(1, {"shape": (8, 8), "lr": 0.1}, state="stopped_early", steps=9, best=0.2, last=0.3,
                    stopped_early_at=9, why="ASHA at step 9", curve=[[1.0, 0.5], [9.0, 0.3]])
    store.save(member)
    store.save(Member(2, {"shape": (16,), "lr": 0.2}))
    store.close()
    store = open_study(path, SIGNATURE)
    kept = store.members()
    assert kept[0] == member and kept[0].params["shape"] == (8, 8) and kept[1].state == "queued"
    store.close()
    with pytest.raises(LaunchError, match="does not exist"):
        open_study(str(tmp_path / "no" / "s.db"), {})


@pytest.mark.parametrize("changed", [{"search": "random"}, {"early_stop": "median"}, {"grace": 5}, {"metric": "acc"},
                                     {"reduction_factor": 3}, {"max_steps": 100}, {"metric_reduce": "mean"}])
def test_a_study_made_by_another_sweep_or_rule_is_refused_saying_what_changed(tmp_path, changed):
    path = str(tmp_path / "s.db")
    open_study(path, SIGNATURE).close()
    (key, value), = changed.items()
    with pytest.raises(LaunchError, match=rf"made by another sweep \({key}: {SIGNATURE[key]!r} there, {value!r} "
                                          r"here\)\. Give this sweep its own --study file"):
        open_study(path, {**SIGNATURE, **changed})


def test_an_earlier_releases_file_is_read_in_todays_words_and_takes_the_rule_it_never_recorded(tmp_path):
    path = str(tmp_path / "old.db")
    with sqlite3.connect(path) as db:
        db.executescript("CREATE TABLE jtd_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                         "CREATE TABLE jtd_members (number INTEGER PRIMARY KEY, record TEXT NOT NULL);")
        old = {k: SIGNATURE[k] for k in ("space", "search", "metric", "mode", "seed")}
        db.execute("INSERT INTO jtd_meta VALUES ('sweep', ?)", (json.dumps(old),))
        record = {"number": 1, "params": "{'lr': 1}", "state": "pruned", "token": None, "steps": 9, "best": 0.2,
                  "last": 0.3, "final": 0.3, "pruned_at": 9, "why": "ASHA", "seconds": 1.0, "ended_at": 2.0,
                  "curve": [[9.0, 0.3]]}
        db.execute("INSERT INTO jtd_members VALUES (1, ?)", (json.dumps(record),))
    store = open_study(path, SIGNATURE)
    (member,) = store.members()
    assert (member.state, member.stopped_early_at, member.owner) == ("stopped_early", 9, None)
    store.close()
    with pytest.raises(LaunchError, match="early_stop: 'asha' there, 'median' here"):
        open_study(path, {**SIGNATURE, "early_stop": "median"})   # recorded from the first resume on


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_two_live_kernels_share_a_study_and_a_gone_ones_members_are_taken_over_once(tmp_path):
    path = str(tmp_path / "s.db")
    first, second = open_study(path, SIGNATURE), open_study(path, SIGNATURE)
    a = first.insert(Member(0, {"lr": 1}))
    b = second.insert(Member(0, {"lr": 2}))
    assert (a.number, b.number) == (1, 2) and first.count() == 2
    a.state = "running"
    first.save(a)
    assert first.owner in second.live_owners(), "the first kernel beats: its running member is its own"
    with sqlite3.connect(path) as db:   # the first kernel's process is gone (killed with its kernel)
        db.execute("UPDATE jtd_owners SET pid = ? WHERE owner = ?", (_dead_pid(), first.owner))
    assert first.owner not in second.live_owners()
    third = open_study(path, SIGNATURE)
    orphans = [m for m in third.members() if m.owner == first.owner]
    assert [m.number for m in second.take(orphans)] == [1]
    assert third.take([m for m in third.members() if m.number == 1 and m.owner == first.owner]) == [], \
        "a member is taken over once"
    assert third.members()[0].owner == second.owner
    second.close()   # a sweep that ended: its unfinished members are the next sweep's at once
    assert second.owner not in third.live_owners()
    for store in (first, third):
        store.close()


def test_the_random_orders_seed_is_the_studys_first(tmp_path):
    path = str(tmp_path / "s.db")
    store = open_study(path, SIGNATURE)
    assert store.draw_seed(11) == 11 and store.draw_seed(12) == 11
    store.close()


def test_each_member_commits_to_a_folder_of_its_own(tmp_path):
    study = str(tmp_path / "lr.db")
    assert commit_folder(study, None, 3, "x") == os.path.join(str(tmp_path), "lr-commits", "member-3")
    assert commit_folder(study, "s3://bucket/ckpt/", 3, "x") == "s3://bucket/ckpt/lr-commits/member-3"
    assert commit_folder(None, "/shared/ckpt", 3, "ab12") == "/shared/ckpt/sweep-ab12/member-3"
    assert commit_folder(None, None, 3, "x") is None
