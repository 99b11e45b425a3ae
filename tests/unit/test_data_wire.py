"""The data plane without Spark: a real producer (the code a data task runs) streaming over real sockets to real
rank receivers. Ordering, the prefetch bound, retried pieces without duplicates, authentication, TLS."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")

from jupyter_torchdist.channel import protocol as P  # noqa: E402
from jupyter_torchdist.data import DataError  # noqa: E402
from jupyter_torchdist.data.codec import Header, decode, encode, join  # noqa: E402
from jupyter_torchdist.data.convert import arrow_columns, output_columns, take_rows, to_torch  # noqa: E402
from jupyter_torchdist.data.plan import plan_epoch  # noqa: E402
from jupyter_torchdist.data.producer import AHEAD_FRAGMENTS, ProducerSpec, run_piece  # noqa: E402
from jupyter_torchdist.data.receiver import Receiver  # noqa: E402

SECRET = b"k" * 32


def _table(n: int, offset: int = 0, width: int = 6):
    ids = np.arange(offset, offset + n, dtype=np.int64)
    return pa.table({"id": ids, "img": pa.array([np.full(width, i, dtype=np.float32) for i in ids],
                                                type=pa.list_(pa.float32())), "name": [f"r{i}" for i in ids]})


def _piece_json(piece):
    return {"id": piece.id, "partition": piece.partition, "lo": piece.lo, "hi": piece.hi,
            "fragments": [[f.rank, f.step, f.index, f.of, f.rows] for f in piece.fragments]}


class World:
    """``world`` rank receivers in this process, one feed each, and a way to run pieces into them."""

    def __init__(self, world: int, prefetch: int = 2, tls: bool = False, transform=None, shuffle=True) -> None:
        self.receivers = [Receiver("127.0.0.1", SECRET, tls=tls) for _ in range(world)]
        self.feeds = [r.open_feed(prefetch) for r in self.receivers]
        self.spec = ProducerSpec(SECRET, tuple(r.listener.address for r in self.receivers),
                                 tuple(r.listener.pin for r in self.receivers), tuple(f.token for f in self.feeds),
                                 None if transform is None else __import__("cloudpickle").dumps(transform),
                                 getattr(transform, "__name__", ""), shuffle, 3, 1)

    def produce(self, piece, table) -> dict:
        return run_piece(self.spec, _piece_json(piece), iter(table.to_batches(max_chunksize=50)))

    def close(self) -> None:
        for r in self.receivers:
            r.close()


def _consume(feed, steps, out, delay=0.0):
    for _ in range(steps):
        out.append(feed.take())
        time.sleep(delay)


def test_codec_round_trip_keeps_arrays_without_copies_and_joins_fragments():
    columns = {"x": np.arange(5, dtype=np.float32), "img": np.ones((5, 2, 3), np.float64), "s": list("abcde")}
    body = b"".join(bytes(c) for c in encode(columns))
    back = decode(bytearray(body))
    assert back["x"].tolist() == [0, 1, 2, 3, 4] and back["img"].shape == (5, 2, 3) and back["s"] == list("abcde")
    both = join([back, decode(bytearray(body))])
    assert both["x"].shape == (10,) and both["s"] == list("abcde") * 2
    h = Header(7, 3, 1, 2, 5, len(body))
    assert Header.unpack(h.pack()) == h


def test_columns_become_arrays_tensors_or_lists():
    cols = arrow_columns(_table(4))
    assert cols["id"].dtype == np.int64 and cols["img"].shape == (4, 6) and cols["name"] == ["r0", "r1", "r2", "r3"]
    ragged = arrow_columns(pa.table({"v": pa.array([[1.0], [1.0, 2.0]])}))
    assert ragged["v"] == [[1.0], [1.0, 2.0]], "unequal lengths stay a list"
    tensors = to_torch(cols)
    assert tuple(tensors["img"].shape) == (4, 6) and tensors["name"][0] == "r0"
    out = output_columns({"a": np.zeros((4, 3))}, 4)
    assert out["a"].shape == (4, 3)
    with pytest.raises(ValueError, match="one row per input row"):
        output_columns({"a": np.zeros(3)}, 4)
    with pytest.raises(TypeError, match="pandas DataFrame or a dict"):
        output_columns(42, 4)


def test_take_rows_is_arrows_take_for_every_kind_of_column():
    table = _table(40, width=5).append_column("ragged", pa.array([[float(i)] * (i % 3) for i in range(40)]))
    table = table.append_column("holes", pa.array([None if i % 7 == 0 else [1, i] for i in range(40)]))
    table = table.append_column("nested", pa.array([[[i, 1], [2]] for i in range(40)]))
    table = table.append_column("inner_nulls", pa.array([[1.0, None] for _ in range(40)]))
    table = table.replace_schema_metadata({"from": "spark"})
    order = list(np.random.default_rng(0).permutation(30))
    for source in (table, table.slice(10, 30), pa.concat_tables([table.slice(0, 10), table.slice(10, 20)])):
        rows = [i for i in order if i < len(source)]
        got, want = take_rows(source, rows), source.take(rows)
        assert got.equals(want) and got.schema.equals(source.schema, check_metadata=True), "same rows, types, metadata"
    assert take_rows(table.slice(0, 0), []).num_rows == 0


@pytest.mark.parametrize("tls", [False, True])
def test_pieces_stream_to_every_rank_in_step_order(tls):
    counts = [130, 70]
    plan = plan_epoch(counts, 2, 16, lanes=1, seed=3, epoch=1)
    world = World(2, tls=tls)
    try:
        got = [[], []]
        readers = [threading.Thread(target=_consume, args=(f, plan.steps, g)) for f, g in zip(world.feeds, got)]
        for t in readers:
            t.start()
        tables = {0: _table(130), 1: _table(70, 1000)}
        for piece in plan.pieces:
            assert "error" not in world.produce(piece, tables[piece.partition].slice(0))
        for t in readers:
            t.join(10)
        assert all(len(g) == plan.steps for g in got)
        ids = [i for g in got for b in g for i in b["id"].tolist()]
        assert len(ids) == len(set(ids)) == plan.rows_used
        assert all(b["img"].shape == (16, 6) for g in got for b in g)
    finally:
        world.close()


def test_a_slow_rank_holds_at_most_prefetch_batches_and_its_workers_wait():
    plan = plan_epoch([400], 1, 10, lanes=1, shuffle=False)
    world = World(1, prefetch=2, shuffle=False)
    try:
        feed = world.feeds[0]
        done = threading.Event()
        big = _table(400, width=20_000)  # 800 KB a batch: far more than the sockets' buffers hold
        producer = threading.Thread(target=lambda: (world.produce(plan.pieces[0], big), done.set()))
        producer.start()
        time.sleep(0.5)
        with feed._cond:
            held = set(feed._parts)
        assert held <= {0, 1} and not done.is_set(), "the worker waits once the rank holds `prefetch` batches"
        out: list = []
        _consume(feed, plan.steps, out)
        producer.join(10)
        assert done.is_set() and [b["id"][0].item() for b in out[:3]] == [0, 10, 20]
    finally:
        world.close()


def test_a_retried_piece_delivers_nothing_twice():
    plan = plan_epoch([100], 2, 10, lanes=1, shuffle=True, seed=5)
    world = World(2, prefetch=10)
    try:
        piece = plan.pieces[0]
        world.produce(piece, _table(100))   # the first attempt got everything through ...
        world.produce(piece, _table(100))   # ... and its retry sends it all again
        got = [[], []]
        for feed, g in zip(world.feeds, got):
            _consume(feed, plan.steps, g)
        ids = [i for g in got for b in g for i in b["id"].tolist()]
        assert sorted(ids) == sorted(set(ids)) and len(ids) == plan.rows_used
    finally:
        world.close()


def test_the_transform_runs_in_the_producer_and_its_exception_names_it():
    def blur(pdf):
        pdf = pdf.copy()
        pdf["img"] = [np.asarray(v) * 2 for v in pdf["img"]]
        return pdf[["id", "img"]]

    plan = plan_epoch([40], 1, 8, lanes=1, shuffle=False)
    world = World(1, prefetch=8, transform=blur, shuffle=False)
    try:
        assert "error" not in world.produce(plan.pieces[0], _table(40))
        batch = world.feeds[0].take()
        assert set(batch) == {"id", "img"} and batch["img"][1].tolist() == [2.0] * 6
    finally:
        world.close()

    def broken(pdf):
        raise ValueError("no such pixel")

    world = World(1, transform=broken)
    try:
        status = world.produce(plan.pieces[0], _table(40))
        assert "the transform broken failed on partition 0 (rows 0-39): ValueError: no such pixel" in status["error"]
        assert "in broken" in status["traceback"] and status["user"]
    finally:
        world.close()


def test_a_partition_shorter_than_planned_is_an_error_not_silence():
    plan = plan_epoch([100], 1, 10, lanes=1)
    world = World(1)
    try:
        status = world.produce(plan.pieces[0], _table(60))
        assert "has 60 rows, but the plan counted at least 100" in status["error"]
    finally:
        world.close()


def test_a_wrong_secret_is_refused_and_the_feed_goes_on():
    world = World(1)
    try:
        receiver = world.receivers[0]
        raw = socket.create_connection(receiver.listener.address, timeout=5)
        greeting = P.recv_exact(raw, len(P.MAGIC) + P.NONCE_LEN)
        nonce = greeting[len(P.MAGIC):]
        raw.sendall(P.ROLE_DATA + (0).to_bytes(4, "big") + P.client_mac(b"x" * 32, nonce, P.ROLE_DATA, 0))
        assert raw.recv(64) == b"", "refused: closed without a reply"
        raw.close()
        deadline = time.monotonic() + 5
        while receiver.refused < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert receiver.refused == 1
        plan = plan_epoch([20], 1, 10, lanes=1)
        world.produce(plan.pieces[0], _table(20))
        assert world.feeds[0].take()["id"].shape == (10,)
    finally:
        world.close()


def test_a_failed_feed_raises_in_the_training_loop():
    world = World(1)
    try:
        feed = world.feeds[0]
        threading.Timer(0.2, feed.fail, args=("the transform t failed on partition 2",)).start()
        with pytest.raises(DataError, match="failed on partition 2"):
            feed.take()
        assert feed.wait_s >= 0.15
    finally:
        world.close()


def test_the_listener_binds_one_address():
    receiver = Receiver("127.0.0.1", SECRET)
    try:
        assert receiver.listener.sock.getsockname()[0] == "127.0.0.1"
    finally:
        receiver.close()


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
@pytest.mark.parametrize("ahead", [False, True])
def test_a_piece_started_ahead_makes_its_first_batches_at_idle_priority(ahead):
    def policy(pdf):
        import os as _os

        return {"id": pdf["id"].to_numpy(), "policy": [_os.sched_getscheduler(0)] * len(pdf)}

    plan = plan_epoch([40], 1, 8, lanes=1, shuffle=False)
    world = World(1, prefetch=8, transform=policy, shuffle=False)
    try:
        piece = {**_piece_json(plan.pieces[0]), "ahead": ahead}
        assert "error" not in run_piece(world.spec, piece, iter(_table(40).to_batches(max_chunksize=50)))
        seen = [world.feeds[0].take()["policy"][0] for _ in range(plan.steps)]
        idle = [os.SCHED_IDLE] * AHEAD_FRAGMENTS if ahead else [os.SCHED_OTHER] * AHEAD_FRAGMENTS
        assert seen == idle + [os.SCHED_OTHER] * (plan.steps - AHEAD_FRAGMENTS)
    finally:
        world.close()


@pytest.mark.slow  # seconds: Spark's daemon forks real workers
def test_the_spark_daemon_forks_workers_with_its_imports_frozen_out_of_the_gc():
    code = "import gc, jupyter_torchdist._daemon; print(gc.get_freeze_count())"
    frozen = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                timeout=120).stdout.split()[-1])
    assert frozen > 100_000, "torch, pandas and pyarrow's objects are frozen before the daemon forks"
