"""--max-restarts on real ranks: a rank SIGKILLed from outside mid-run, the run started again from the last
jt.commit; a rank told to go (SIGTERM) giving every rank notice and a commit first; the model equal to an
uninterrupted run's and every batches() row trained on once per epoch; what is not retried (the cell's own
exception, --max-restarts 0); a checkpoint folder that cannot be written."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import cloudpickle
import pytest

import jupyter_torchdist as jt
from jupyter_torchdist.core.errors import RunFailed

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the ranks cannot import the tests package

ROWS, BATCH, EPOCHS = 64, 4, 2  # 8 steps an epoch on 2 ranks


def train(df, pid_file: str | None, kill_at: int):
    """Two epochs of a tiny model on batches of ``df``; rank 1 waits to be killed at step ``kill_at`` (first
    attempt only) after writing its pid. Commits every step, with the ids every rank trained on."""
    import torch
    import torch.distributed as dist

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    log: dict = {"seen": [], "attempts": 0}
    step = jt.restore(model=model, optimizer=opt, log=log)
    log["attempts"] += 1
    for epoch in range(EPOCHS):
        for batch in jt.batches(df, BATCH, epoch=epoch, seed=3):
            loss = (model(batch["x"]) - batch["id"].float().unsqueeze(1)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= dist.get_world_size()
            opt.step()
            ids: list = [None] * dist.get_world_size()
            dist.all_gather_object(ids, batch["id"].tolist())
            log["seen"] += [i for part in ids for i in part]
            step += 1
            jt.commit(step, model=model, optimizer=opt, log=log)
            if pid_file and step == kill_at and dist.get_rank() == 1 and log["attempts"] == 1:
                Path(pid_file).write_text(str(os.getpid()))
                time.sleep(60)  # killed from outside here
    return [p.detach().clone() for p in model.parameters()], log


def _kill_when_written(pid_file: Path) -> threading.Thread:
    def kill() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if pid_file.exists() and pid_file.read_text():
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
                return
            time.sleep(0.05)
    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


@pytest.fixture(scope="module")
def frame(spark):
    return spark.range(0, ROWS, numPartitions=4).selectExpr("id", "array(cast(id as float), 1f, 2f, 3f) as x")


@pytest.mark.spark
def test_a_rank_killed_mid_run_restarts_from_the_last_commit_with_its_data_position(frame, tmp_path):
    pid_file = tmp_path / "pid"
    killer = _kill_when_written(pid_file)
    result = jt.run_detailed(train, frame, str(pid_file), 5, n=2, local=True, max_restarts=1, timeout=180,
                             data_workers=2)
    killer.join(1)
    (weights, log) = result.value
    assert [a.failure.kind for a in result.attempts] == ["exit"] and result.attempts[0].failure.signal == "SIGKILL"
    assert result.attempts[0].commit_step == 5 and log["attempts"] == 2
    assert sorted(log["seen"]) == sorted(list(range(ROWS)) * EPOCHS), "every row once per epoch, none twice"
    plain, plain_log = jt.run(train, frame, None, 0, n=2, local=True, timeout=180, data_workers=2)
    assert plain_log["seen"] == log["seen"], "the same rows in the same order as an uninterrupted run"
    assert all((a - b).abs().max().item() == 0 for a, b in zip(weights, plain)), "the same model, exactly"
    assert any("attempt 1 of 2 failed: rank 1" in n and "restarted from step 5" in n
               for n in result.state.notes), result.state.notes


def preempted_training(pid_file: str, marks: str):
    """A counter stepped on both ranks, committed every 1000 steps; on the first attempt rank 1 writes its pid at
    step 3 (the test then sends it SIGTERM) and the ranks step on until it is gone. Each rank notes the step of a
    commit made on the first attempt (there is none but the one the notice makes due)."""
    import torch
    import torch.distributed as dist

    os.environ["JUPYTER_TORCHDIST_PREEMPT_GRACE_S"] = "2"   # this host's grace (read when the notice comes)
    log = {"attempts": 0}
    step = jt.restore(log=log)
    log["attempts"] += 1
    first = log["attempts"] == 1
    while step < 40 or (first and step < 2000):
        t = torch.ones(1)
        dist.all_reduce(t)
        step += 1
        if jt.commit(step, every=1000, log=log) and first:
            with open(marks, "a") as f:
                f.write(f"{dist.get_rank()}:{step}:{jt.preempted()}\n")
        if first and step == 3 and dist.get_rank() == 1:
            Path(pid_file).write_text(str(os.getpid()))
        time.sleep(0.05 if first else 0)
    return step, log["attempts"], jt.preempted()


def test_a_rank_told_to_go_gives_every_rank_notice_and_a_commit_then_the_run_resumes_from_it(tmp_path):
    """SIGTERM (a spot reclaim, a drained node, kill) is not SIGKILL: the rank says so, every rank's
    jt.preempted() turns true and its next commit is made whatever its every=, the rank goes after its grace,
    and --max-restarts starts the run again from that commit."""
    pid_file, marks = tmp_path / "pid", tmp_path / "marks"
    told: dict[str, float] = {}

    def tell() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if pid_file.exists() and pid_file.read_text():
                told["at"] = time.time()
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
                return
            time.sleep(0.05)

    teller = threading.Thread(target=tell, daemon=True)
    teller.start()
    result = jt.run_detailed(preempted_training, str(pid_file), str(marks), n=2, local=True, max_restarts=1,
                             timeout=120)
    teller.join(1)
    lines = sorted(marks.read_text().split())
    assert len(lines) == 2 and lines[0].startswith("0:") and lines[1].startswith("1:"), lines
    committed = {int(line.split(":")[1]) for line in lines}
    assert len(committed) == 1 and all(line.endswith(":True") for line in lines), "one commit, on notice, by both"
    attempt = result.attempts[0]
    assert attempt.failure.signal == "SIGTERM" and attempt.commit_step == committed.pop()
    assert attempt.failed_at - told["at"] >= 1.5, "the rank had its grace before it went"
    assert result.value == (40, 2, False), result.value   # resumed from the commit; the new ranks were not told
    assert any("attempt 1 of 2 failed: rank 1" in n and "told to go (SIGTERM) and ended 2 s later" in n
               and f"restarted from step {attempt.commit_step}" in n for n in result.state.notes), result.state.notes


def fails_in_its_own_code(pid_file: str):
    import torch.distributed as dist

    with open(pid_file, "a") as f:  # O_APPEND: one x per rank and attempt, whatever the order
        f.write("x")
    if dist.get_rank() == 1:
        raise ValueError("the cell's own bug")
    dist.barrier()


def test_an_exception_in_the_cell_is_never_retried(tmp_path):
    tries = tmp_path / "tries"
    tries.write_text("")
    with pytest.raises(RunFailed, match="the cell's own bug") as info:
        jt.run(fails_in_its_own_code, str(tries), n=2, local=True, max_restarts=3, timeout=60)
    assert tries.read_text() == "xx" and info.value.result.attempts == []  # one attempt, on both ranks


def dies(pid_file: str):
    import torch.distributed as dist

    step = jt.restore(log={})
    jt.commit(step + 1, log={})
    if dist.get_rank() == 1:
        time.sleep(1)  # rank 0 writes the commit in the background meanwhile (killed mid-write, the one before stands)
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def test_without_restarts_a_killed_rank_fails_the_cell_and_with_them_the_limit_holds(tmp_path):
    with pytest.raises(RunFailed, match="killed by SIGKILL"):
        jt.run(dies, "", n=2, local=True, timeout=60)
    with pytest.raises(RunFailed, match="killed by SIGKILL") as info:
        jt.run(dies, "", n=2, local=True, max_restarts=2, timeout=60)
    attempts = info.value.result.attempts
    assert [a.number for a in attempts] == [1, 2] and [a.commit_step for a in attempts] == [1, 2]
    text = "\n".join(info.value._render_traceback_())
    assert "attempt 1 of 3 failed" in text and "attempt 2 of 3 failed" in text, text


def test_a_checkpoint_folder_the_ranks_cannot_write_fails_at_once(tmp_path):
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    began = time.monotonic()
    with pytest.raises(RunFailed, match="cannot write to the checkpoint folder"):
        jt.run(dies, "", n=2, local=True, max_restarts=1, checkpoint_dir=str(blocked / "sub"), timeout=60)
    assert time.monotonic() - began < 30


def test_kept_ranks_lost_mid_cell_restart_from_the_last_commit_at_the_next_cell(capsys):
    with jt.Ranks(n=2, local=True, max_restarts=1) as ranks:
        ranks.run_cell("import os, signal, torch, torch.distributed as dist\nimport jupyter_torchdist as jt\n"
                       "w = torch.zeros(2)\nstep = jt.restore(w=w)")
        ranks.run_cell("for _ in range(3):\n    t = torch.ones(2)\n    dist.all_reduce(t)\n    w += t\n"
                       "    step += 1\n    jt.commit(step, w=w)\nextra = 'defined after the commit'")
        with pytest.raises(RunFailed, match="SIGKILL") as info:
            ranks.run_cell("time = __import__('time')\ntime.sleep(1)\n"
                           "if dist.get_rank() == 1:\n    os.kill(os.getpid(), signal.SIGKILL)\ndist.barrier()")
        assert "start again from the last commit at the next cell (1 restarts left)" in info.value.extra[-1]
        assert ranks.alive
        value = ranks.run_cell("(step, w.tolist(), 'extra' in globals())")
        assert value == (3, [6.0, 6.0], False), value  # cell 1 ran again, restoring the commit of step 3
        assert "kept ranks restarted from step 3; names defined since then are gone" in capsys.readouterr().out
        with pytest.raises(RunFailed, match="SIGKILL") as info:  # no restarts left: the set is gone
            ranks.run_cell("if dist.get_rank() == 0:\n    os.kill(os.getpid(), signal.SIGKILL)\ndist.barrier()")
        assert not ranks.alive


def dies_the_first_time(marker: str):
    import torch.distributed as dist

    if dist.get_rank() == 1 and not os.path.exists(marker):
        Path(marker).write_text("killed once")
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    return "second attempt"


def test_a_background_run_restarts_after_a_lost_rank_under_its_one_handle(tmp_path):
    run = jt.run(dies_the_first_time, str(tmp_path / "marker"), n=2, local=True, max_restarts=1, timeout=60,
                 background=True)
    assert run.result(timeout=120) == "second attempt" and run.state == "done"
    assert [a.failure.signal for a in run.details.attempts] == ["SIGKILL"]
