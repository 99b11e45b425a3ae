"""Unit (pure and local): what a restart resumes. The rest of an epoch's plan after ``taken`` steps delivers exactly
the rows the full plan delivers at those later steps, in the same order; what is retried and what is not; the
checkpoint folder (atomic commits, pruning); the options; one view across attempts."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_torchdist.data.plan import block_order, plan_epoch, resume_plan
from jupyter_torchdist.core.errors import OptionsError, RankFailure, RunFailed, RunTimeout
from jupyter_torchdist.kernel.runs.restarts import CheckpointFolder, ContinuedView, restartable
from jupyter_torchdist.core.options import RunOptions, parse_options
from jupyter_torchdist.rank.checkpoint_store import Store, commit_name


def _delivered(plan, skip_from_piece: bool = True) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """(rank, step) -> the (partition, row) pairs in its batch, in order, as the producers would send them."""
    out: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for piece in plan.pieces:
        order = block_order(piece.hi - piece.lo, True, 7, 1, (piece.partition, piece.lo))
        at = piece.skip
        for f in piece.fragments:
            rows = [(piece.partition, piece.lo + order[i]) for i in range(at, at + f.rows)]
            out.setdefault((f.rank, f.step), []).extend(rows)  # fragments of one batch: index order = piece order
            at += f.rows
    return out


@settings(max_examples=60, deadline=None)
@given(counts=st.lists(st.integers(0, 300), min_size=1, max_size=8), world=st.integers(1, 4),
       batch=st.integers(1, 9), lanes=st.integers(1, 4), taken=st.integers(0, 40))
def test_the_rest_of_an_epoch_is_exactly_its_later_steps(counts, world, batch, lanes, taken):
    full = plan_epoch(counts, world, batch, lanes=lanes, seed=7, epoch=1)
    rest = resume_plan(full, taken)
    assert rest.steps == max(0, full.steps - taken)
    before, after = _delivered(full), _delivered(rest)
    expected = {(r, s - taken): rows for (r, s), rows in before.items() if s >= taken}
    assert {k: sorted(v) for k, v in after.items()} == {k: sorted(v) for k, v in expected.items()}
    assert rest.rows_used == sum(len(v) for v in expected.values())


def _failed(kind: str, secondary: bool = False, signal: str | None = None) -> RunFailed:
    return RunFailed("x", {1: RankFailure(1, "h", kind, "s", secondary=secondary, signal=signal)}, 2)


def test_only_failures_from_outside_the_cell_are_restarted():
    assert restartable(_failed("lost")) is not None
    assert restartable(_failed("exit", signal="SIGKILL")) is not None
    assert restartable(_failed("exception", secondary=True)) is not None  # only peers' connection errors
    assert restartable(_failed("exception")) is None                       # the cell's own exception
    assert restartable(_failed("exit")) is None                            # sys.exit / os._exit with a code
    assert restartable(_failed("launch")) is None
    assert restartable(RunTimeout("t", world_size=2)) is None


def test_commits_are_atomic_and_only_the_last_two_are_kept(tmp_path):
    store = Store(str(tmp_path / "ckpt"))
    assert store.steps() == []
    for step in (5, 10, 15):
        store.write(commit_name(step), f"state {step}".encode())
        store.prune()
    assert store.steps() == [10, 15] and store.read(commit_name(15)) == b"state 15"
    (tmp_path / "ckpt" / ".commit-000000000020.pt.ab12.tmp").write_bytes(b"half")  # a writer killed mid-write
    assert store.steps() == [10, 15]
    url = Store(f"file://{tmp_path / 'ckpt'}")
    assert url.steps() == [10, 15]
    memory = Store("memory://jtd-test/ckpt")  # an fsspec URL: the object store path
    memory.write(commit_name(3), b"three")
    assert memory.steps() == [3] and memory.read(commit_name(3)) == b"three"


def test_the_options_and_the_folder_a_run_gets(tmp_path):
    options = parse_options("-n 2 --max-restarts 3 --checkpoint-dir /shared/ckpt")
    assert options.max_restarts == 3 and options.checkpoint_dir == "/shared/ckpt"
    with pytest.raises(OptionsError, match="--max-restarts must be a whole number >= 0"):
        RunOptions(max_restarts=-1)
    with pytest.raises(OptionsError, match="--checkpoint-dir must be a folder or a URL"):
        RunOptions(checkpoint_dir=" ")
    made = CheckpointFolder.for_run(RunOptions(max_restarts=1), loopback=True)
    assert made.made and made.where is not None
    made.remove()
    assert CheckpointFolder.for_run(RunOptions(), loopback=True).where is None  # no restarts: no commits
    given = CheckpointFolder.for_run(RunOptions(checkpoint_dir=str(tmp_path)), loopback=False)
    assert given.where == str(tmp_path) and not given.made
    with pytest.raises(Exception, match="--max-restarts on a cluster needs --checkpoint-dir"):
        CheckpointFolder.for_run(RunOptions(max_restarts=1), loopback=False)


class _Recorder:
    log_tail = 7

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def start(self, snapshot):
        self.calls.append(("start", snapshot["n"]))

    def update(self, snapshot):
        self.calls.append(("update", snapshot["n"]))

    def finish(self, snapshot):
        self.calls.append(("finish", snapshot["n"]))


def test_one_view_across_attempts_becomes_the_report_only_at_the_end():
    inner = _Recorder()
    view = ContinuedView(inner)
    view.start({"n": 1})
    view.finish({"n": 2})   # attempt 1 ends: still live
    view.start({"n": 3})    # attempt 2 draws over it
    view.finish({"n": 4})
    view.close()
    assert inner.calls == [("start", 1), ("update", 2), ("update", 3), ("update", 4), ("finish", 4)]
    assert view.log_tail == 7


def test_a_commit_restores_state_dicts_and_containers_in_place(tmp_path):
    import torch

    from jupyter_torchdist.rank.checkpoint import Checkpoints

    said: list[dict] = []
    position = {"epoch#1": {"lanes": 2, "steps": 8, "taken": 3}}
    ours = Checkpoints(str(tmp_path), 0, said.append, lambda: position)
    model, log = torch.nn.Linear(2, 1), {"seen": [1, 2]}
    ours.commit(7, {"model": model, "log": log})
    ours.flush()
    assert [m["step"] for m in said] == [7] and said[0]["t"] == "commit" and said[0]["bytes"] > 0
    other = Checkpoints(str(tmp_path), 1, said.append, dict)  # another rank, after a restart
    fresh, fresh_log = torch.nn.Linear(2, 1), {"seen": []}
    assert other.restore({"model": fresh, "log": fresh_log}) == 7
    assert torch.equal(fresh.weight, model.weight) and fresh_log == {"seen": [1, 2]}
    assert other.restored == position
    with pytest.raises(TypeError, match="cannot be restored in place"):
        other.restore({"log": 3})
    with pytest.raises(KeyError, match="has no 'optimizer'"):
        other.restore({"optimizer": {}})
    other.commit(9, {"model": fresh})  # rank 1 never writes: one write per commit
    other.flush()
    assert Store(str(tmp_path)).steps() == [7]


def test_every_rank_restores_the_commit_the_ranks_agree_on(tmp_path):
    """A rank that found a newer commit than a peer (one a faster rank made after restoring) loads the agreed one."""
    import torch

    from jupyter_torchdist.rank.checkpoint import Checkpoints

    ours = Checkpoints(str(tmp_path), 0, [].append, dict)
    for step in (1, 2):
        ours.commit(step, {"w": torch.full((1,), float(step))})
        ours.flush()
    asked: list[int] = []
    late = Checkpoints(str(tmp_path), 1, [].append, dict, agree=lambda latest: asked.append(latest) or 1)
    w = torch.zeros(1)
    assert late.restore({"w": w}) == 1 and w.item() == 1.0 and asked == [2]
    nothing = Checkpoints(str(tmp_path / "fresh"), 1, [].append, dict, agree=lambda latest: latest)
    assert nothing.restore({"w": w}) == 0
