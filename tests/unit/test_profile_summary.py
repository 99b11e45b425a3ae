"""Where a rank's step time went, from its trace's events; which rank the others wait for."""
from __future__ import annotations

from jupyter_torchdist.core.profile_summary import shares_of, slowest, verdict


def _x(name, ts, dur, cat="cpu_op"):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "cat": cat}


def test_time_is_counted_once_input_then_compute_then_exposed_communication():
    events = [
        _x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 40, "user_annotation"),
        _x("aten::stack", 30, 5),                 # inside the input span: input
        _x("aten::addmm", 40, 20),                # compute
        _x("gloo:all_reduce", 50, 30, "user_annotation"),   # 50-60 overlaps compute: only 60-80 is exposed
        _x("ProfilerStep#1", 0, 100, "user_annotation"),    # the span: 100 us, 20 of them in nothing known
    ]
    s = shares_of(events, steps=1)
    assert (s["input"], s["compute"], s["comm"], s["other"]) == (0.4, 0.2, 0.2, 0.2)
    assert s["span_s"] == 0.0001 and s["steps"] == 1


def test_an_empty_trace_has_no_shares():
    assert shares_of([], 0)["span_s"] == 0.0


def test_the_slowest_rank_is_the_one_the_others_wait_for():
    ranks = {0: {"input": 0.05, "compute": 0.1, "comm": 0.8, "other": 0.05, "step_s": 0.1, "steps": 5},
             1: {"input": 0.7, "compute": 0.1, "comm": 0.1, "other": 0.1, "step_s": 0.1, "steps": 5}}
    assert slowest(ranks) == 1
    line = verdict(ranks)
    assert line.startswith("rank 1 is the slowest: 70% of its step time waiting for input")
    assert "the others wait for it (80%" in line


def test_ranks_that_all_communicate_alike_are_judged_by_their_steps():
    ranks = {0: {"input": 0.0, "compute": 0.2, "comm": 0.7, "other": 0.1, "step_s": 0.20, "steps": 3},
             1: {"input": 0.0, "compute": 0.2, "comm": 0.72, "other": 0.08, "step_s": 0.21, "steps": 3}}
    assert slowest(ranks) == 1
    assert verdict(ranks) == ("rank 1 is the slowest: 72% of its step time communicating (all-reduce and other "
                              "collectives); every rank 70%-72% in collectives: the collectives themselves take the "
                              "time, no rank holds the others up")
    computing = {r: {**s, "compute": s["comm"], "comm": s["compute"]} for r, s in ranks.items()}
    assert verdict(computing) == "rank 1 is the slowest: 72% of its step time computing"
    assert verdict({}) is None


def test_a_wait_in_batches_is_input_and_marked_only_while_a_window_is_open():
    import contextlib

    from jupyter_torchdist.rank import profiler

    s = shares_of([_x("jupyter_torchdist.batches", 0, 30, "user_annotation"), _x("aten::mm", 30, 70)], 1)
    assert (s["input"], s["compute"]) == (0.3, 0.7)
    assert isinstance(profiler.input_mark(), contextlib.nullcontext)   # no window open: nothing is recorded


def test_collectives_that_dominate_even_the_rank_waited_for_are_named_first():
    # rank 1 computes a little longer, but even it spends most of its step in the all-reduce
    ranks = {0: {"input": 0.0, "compute": 0.02, "comm": 0.93, "other": 0.05, "step_s": 0.03, "steps": 5},
             1: {"input": 0.0, "compute": 0.15, "comm": 0.80, "other": 0.05, "step_s": 0.03, "steps": 5}}
    assert slowest(ranks) == 1
    assert verdict(ranks) == ("rank 1 is the slowest: 80% of its step time communicating (all-reduce and other "
                              "collectives); every rank 80%-93% in collectives: the collectives themselves take the "
                              "time; the others also wait for it: 15% of its step time computing")
    alone = {0: {"input": 0.0, "compute": 0.1, "comm": 0.0, "other": 0.9, "step_s": 0.03, "steps": 5}}
    assert verdict(alone) == "rank 0 is the slowest: 90% of its step time outside operators"
