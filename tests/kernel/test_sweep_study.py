"""A search through the magic in real kernels: a space with a distribution, --trials and --study; the kernel killed
while a member trains; the same cell in a new kernel goes on where the search stopped (finished members kept, not
run again; the member that was training run again from its last jt.commit), and a distribution that does not parse
starts nothing."""
from __future__ import annotations

import json
import time
from pathlib import Path

from ..support.kernel import Kernel, loaded_kernel
from ..support.procs import descendants_of

CELL = ("%%distribute -n 2 --local --sweep \"lr=loguniform(1e-3, 1.0); width=[4, 8]\" --trials 4 --seed 3 "
        "--concurrent 1 --study {study}\n") + """import os, time
from pathlib import Path
state = {{"step": 0}}
start = jupyter_torchdist.restore(state=state)
Path({marks!r}, f"{{lr}}-{{os.getpid()}}-{{start}}").touch()
for step in range(start + 1, 4):
    state["step"] = step
    jupyter_torchdist.report(step=step, loss=lr / step)
    jupyter_torchdist.commit(step, state=state)
    time.sleep({nap})
"""


def _lrs(marks: Path) -> set[str]:
    return {p.name.split("-")[0] for p in marks.iterdir()}


def _done(k: Kernel) -> int:
    r = k.execute("print(sum(r.state == 'done' for r in jupyter_torchdist.runs()))")
    return int(k.text(r).strip())


def test_a_study_goes_on_in_a_new_kernel_where_the_search_stopped(tmp_path):
    study, marks = tmp_path / "search.db", tmp_path / "marks"
    marks.mkdir()
    first = Kernel()
    try:
        assert first.execute("%load_ext jupyter_torchdist\nimport jupyter_torchdist")["status"] == "ok"
        r = first.execute(CELL.format(study=study, marks=str(marks), nap=1.0))
        assert r["status"] == "ok", first.text(r)
        deadline = time.time() + 120
        third = tmp_path / "search-commits" / "member-3"   # each member commits to a folder of its own
        while _done(first) < 2 or len(_lrs(marks)) < 3 or not list(third.glob("commit-*")):
            assert time.time() < deadline, "two members did not finish, and a third commit, in 120 s"
            time.sleep(0.2)
        pid = first.pid
    finally:
        first.shutdown()   # killed mid-search: one member training, one queued
    deadline = time.time() + 30
    while pid and descendants_of(pid) and time.time() < deadline:
        time.sleep(0.2)
    training = _lrs(marks)   # the two that finished and the one training when the kernel died
    with loaded_kernel(setup="import jupyter_torchdist") as k:
        r = k.execute(CELL.format(study=study, marks=str(marks), nap=0.0) + "\n")
        assert r["status"] == "ok", k.text(r)
        r = k.execute("s = _\nassert s.wait(180)\nimport json\n"
                      "print(json.dumps([[row['lr'], row['state'], row['run'] is None] for row in s.rows()]))")
        assert r["status"] == "ok", k.text(r)
        rows = json.loads(k.text(r).strip().splitlines()[-1])
    assert len(rows) == 4 and [state for _, state, _ in rows] == ["done"] * 4, rows
    kept = [lr for lr, _, past in rows if past]
    assert len(kept) >= 2, rows
    runs_per_lr = {}
    for p in marks.iterdir():
        lr = p.name.split("-")[0]
        runs_per_lr[lr] = runs_per_lr.get(lr, 0) + 1
    assert all(runs_per_lr[repr(lr)] == 2 for lr in kept), (runs_per_lr, kept)   # 2 ranks, one run each
    again = training - {repr(lr) for lr in kept}
    assert len(again) == 1 and runs_per_lr[next(iter(again))] == 4, runs_per_lr   # the one training: run again ...
    starts = sorted(int(p.name.split("-")[-1]) for p in marks.iterdir() if p.name.split("-")[0] in again)
    assert starts[:2] == [0, 0] and starts[2] == starts[3] >= 1, starts   # ... from its last commit


def test_a_distribution_that_does_not_parse_starts_nothing_and_says_where():
    with loaded_kernel() as k:
        r = k.execute('%%distribute -n 2 --local --sweep "lr=loguniform(1e-4); batch=[32, 64]" --trials 2\n1')
        said = k.text(r)
        assert "lr=loguniform(1e-4)" in said and "two bounds" in said, said
        r = k.execute('%%distribute -n 2 --local --sweep "lr=loguniform(1e-4, 1e-1)"\n1')
        assert "needs --trials N" in k.text(r), k.text(r)
        r = k.execute("import jupyter_torchdist; print(len(jupyter_torchdist.runs()))")
        assert k.text(r).strip() == "0"
