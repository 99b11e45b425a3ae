"""batches() end to end on the embedded Spark session: real data jobs on executors, real ranks, real sockets."""
from __future__ import annotations

import os
import sys
import time

import cloudpickle
import pytest

import jupyter_torchdist as jt

pytest.importorskip("pyarrow")
pytestmark = pytest.mark.spark
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the ranks cannot import the tests package


def _skewed(spark, sizes, width=4):
    """A DataFrame whose partition i holds sizes[i] rows: (id, img: width floats equal to id)."""
    from pyspark.sql.types import ArrayType, FloatType, LongType, StructField, StructType

    def rows(i, _):
        base = sum(sizes[:i])
        return [(base + j, [float(base + j)] * width) for j in range(sizes[i])]

    rdd = spark.sparkContext.parallelize(range(len(sizes)), len(sizes)).mapPartitionsWithIndex(rows)
    schema = StructType([StructField("id", LongType()), StructField("img", ArrayType(FloatType()))])
    return spark.createDataFrame(rdd, schema)


def read_epoch(df, batch_size, **kwargs):
    """On every rank: one epoch's ids, batch by batch, and the shapes seen."""
    import torch.distributed as dist

    out = {"rank": dist.get_rank(), "ids": [], "shapes": set(), "pid": os.getpid()}
    loader = jt.batches(df, batch_size, **kwargs)
    out["steps"] = len(loader)
    for batch in loader:
        out["ids"].append(batch["id"].tolist())
        out["shapes"].add(tuple(batch["img"].shape))
        assert (batch["img"][:, 0].long() == batch["id"]).all(), "columns stay row-aligned"
    return out


def _all_ids(values):
    return [i for v in values for b in v["ids"] for i in b]


@pytest.mark.parametrize("drop_last", [True, False])
def test_equal_steps_and_each_row_at_most_once_under_skew(spark, drop_last):
    sizes = [3, 500, 0, 37, 121, 1]
    df = _skewed(spark, sizes)
    values = jt.run(read_epoch, df, 7, drop_last=drop_last, n=3, all_ranks=True)
    steps = {v["steps"] for v in values}
    assert len(steps) == 1 and all(len(v["ids"]) == v["steps"] for v in values), "every rank, the same steps"
    ids = _all_ids(values)
    assert len(ids) == len(set(ids)) and set(ids) <= set(range(sum(sizes)))
    left = sum(sizes) - len(ids)
    assert 0 <= left < (3 * 7 if drop_last else 3)
    if drop_last:
        assert all(s == (7, 4) for v in values for s in v["shapes"])


def test_shuffle_is_reproducible_and_changes_with_the_epoch(spark):
    df = _skewed(spark, [60, 60, 60, 60])
    first = jt.run(read_epoch, df, 8, seed=11, epoch=0, n=2, all_ranks=True)
    again = jt.run(read_epoch, df, 8, seed=11, epoch=0, n=2, all_ranks=True)
    other = jt.run(read_epoch, df, 8, seed=11, epoch=1, n=2, all_ranks=True)
    assert [v["ids"] for v in first] == [v["ids"] for v in again]
    assert [v["ids"] for v in first] != [v["ids"] for v in other]
    plain = jt.run(read_epoch, df, 8, shuffle=False, n=2, all_ranks=True)
    assert sorted(_all_ids(plain)) == list(range(240))


def on_rank_with_transform(df):
    import torch.distributed as dist

    def where(pdf):
        from jupyter_torchdist.rank.allocator import tuned

        pdf = pdf.copy()
        pdf["pid"] = os.getpid()
        pdf["tuned"] = tuned()
        pdf["img"] = [v * 2 for v in pdf["img"]]
        return pdf

    pids, doubled, tuned = set(), True, True
    for batch in jt.batches(df, 10, transform=where):
        pids |= set(batch["pid"].tolist())
        doubled &= bool((batch["img"][:, 0] == 2 * batch["id"]).all())
        tuned &= bool(batch["tuned"].all())
    return {"rank": dist.get_rank(), "me": os.getpid(), "pids": pids, "doubled": doubled, "tuned": tuned}


def test_the_transform_runs_on_spark_executors_not_in_the_ranks(spark):
    values = jt.run(on_rank_with_transform, _skewed(spark, [50, 50]), n=2, all_ranks=True)
    ranks = {v["me"] for v in values}
    producers = set().union(*(v["pids"] for v in values))
    assert producers and not producers & ranks and os.getpid() not in producers
    assert all(v["doubled"] for v in values)
    assert all(v["tuned"] for v in values), "the data workers keep large temporaries in the heap, as the ranks do"


def failing_transform_loop(df):
    def bad_pixels(pdf):
        raise ValueError("no such pixel")

    for _ in jt.batches(df, 5, transform=bad_pixels):
        pass


def test_a_transform_that_raises_fails_the_run_within_seconds_naming_it(spark):
    t0 = time.monotonic()
    with pytest.raises(jt.RunFailed) as info:
        jt.run(failing_transform_loop, _skewed(spark, [30, 30]), n=2)
    text = str(info.value) + "\n" + info.value.root.traceback
    assert "DataError" in text and "the transform" in text and "bad_pixels failed on partition" in text
    assert "ValueError: no such pixel" in text and "in bad_pixels" in text
    assert time.monotonic() - t0 < 30
    assert not spark.sparkContext.statusTracker().getActiveJobsIds()


def break_then_read_again(df):
    first = []
    for step, batch in enumerate(jt.batches(df, 10, epoch=0)):
        first.append(batch["id"].tolist())
        if step == 1:
            break
    second = [b["id"].tolist() for b in jt.batches(df, 10, epoch=1)]
    return len(first), len(second)


def _no_active_jobs(spark, within=10.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not spark.sparkContext.statusTracker().getActiveJobsIds():
            return True
        time.sleep(0.1)
    return False


def test_breaking_off_stops_the_data_job_and_the_next_epoch_works(spark):
    df = _skewed(spark, [400, 400])
    values = jt.run(break_then_read_again, df, n=2, all_ranks=True)
    assert values == [(2, 40), (2, 40)]
    assert _no_active_jobs(spark), "no data task outlives the run"


def slow_loop(df):
    for _ in jt.batches(df, 4):
        time.sleep(0.5)


def test_a_timeout_stops_the_ranks_and_the_data_job(spark):
    with pytest.raises(jt.RunTimeout):
        jt.run(slow_loop, _skewed(spark, [400, 400]), n=2, timeout=3)
    assert _no_active_jobs(spark)


def kill_worker_once(df, marker):
    def flaky(pdf):
        if not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), 9)  # this data task's Python worker dies mid-epoch
        return pdf

    return [i for b in jt.batches(df, 10, transform=flaky) for i in b["id"].tolist()]


def test_a_data_worker_killed_mid_epoch_is_retried_without_duplicates(spark, tmp_path):
    values = jt.run(kill_worker_once, _skewed(spark, [100, 100, 100]), str(tmp_path / "killed"), n=2,
                    all_ranks=True)
    ids = [i for v in values for i in v]
    assert os.path.exists(tmp_path / "killed")
    assert len(ids) == len(set(ids)) == 300


def test_local_ranks_read_from_the_notebooks_session(spark):
    values = jt.run(read_epoch, _skewed(spark, [64, 64]), 16, n=2, local=True, all_ranks=True)
    assert sorted(_all_ids(values)) == list(range(128))


def test_kept_ranks_read_epochs_across_cells(spark):
    df = _skewed(spark, [80, 80])
    with jt.Ranks(n=2, all_ranks=True) as ranks:
        ranks.run_cell("import jupyter_torchdist as jt\nseen = []", {"df": df})
        ranks.run_cell("for b in jt.batches(df, 8, epoch=0):\n    seen += b['id'].tolist()", {"df": df})
        ranks.run_cell("for b in jt.batches(df, 8, epoch=1):\n    seen += b['id'].tolist()", {"df": df})
        seen = ranks.run_cell("seen")
    assert all(len(s) == 160 for s in seen)
    assert sorted(seen[0][:80] + seen[1][:80]) == list(range(160))


def test_an_epoch_sized_in_one_kept_cell_is_read_in_the_next(spark):
    df = _skewed(spark, [40, 40])
    with jt.Ranks(n=2) as ranks:
        assert ranks.run_cell("import jupyter_torchdist as jt\nloader = jt.batches(df, 8)\nlen(loader)",
                              {"df": df}) == 5
        assert ranks.run_cell("sum(len(b['id']) for b in loader)") == 40, "read in the next cell all the same"


def slow_transform_fast_loop(df):
    def slow(pdf):
        time.sleep(0.15)
        return pdf

    return sum(len(b["id"]) for b in jt.batches(df, 8, transform=slow))


def test_the_view_shows_where_the_time_goes(spark):
    result = jt.run_detailed(slow_transform_fast_loop, _skewed(spark, [160, 160]), n=2, data_workers=1)
    snap = result.state.snapshot()
    waits = [r["usage"]["input_wait"] for r in snap["ranks"]]
    assert all(w is not None and w > 0.5 for w in waits), waits
    assert any("input-bound" in n and "--data-workers" in n for n in snap["notices"]), snap["notices"]
    assert snap["data"]["rows"] == 320 and snap["data"]["workers"] == 1 and snap["data"]["active"] == 0
    assert all(r["usage"]["rss"] > 0 for r in snap["ranks"])


def mismatched(df):
    import torch.distributed as dist

    return sum(1 for _ in jt.batches(df, 4 + dist.get_rank()))


def test_bad_requests_get_clear_errors(spark):
    df = _skewed(spark, [20])
    with pytest.raises(jt.RunFailed, match="same DataFrame and arguments"):
        jt.run(mismatched, df, n=2)
    with pytest.raises(jt.RunFailed, match="batch_size must be a whole number >= 1"):
        jt.run(read_epoch, df, 0, n=2)
    with pytest.raises(jt.RunFailed, match="no column 'nope'"):
        jt.run(read_epoch, df, 4, columns=["nope"], n=2)


def read_epoch_over_tls(df):
    from jupyter_torchdist.rank.runtime import current

    out = read_epoch(df, 8)
    out["tls"] = current().data.receiver.listener.ssl is not None
    return out


def test_with_channel_tls_the_data_plane_is_tls_too(spark, monkeypatch):
    pytest.importorskip("cryptography")
    monkeypatch.setenv("JUPYTER_TORCHDIST_CHANNEL_TLS", "1")
    values = jt.run(read_epoch_over_tls, _skewed(spark, [48, 48]), n=2, all_ranks=True)
    assert all(v["tls"] for v in values) and sorted(_all_ids(values)) == list(range(96))
