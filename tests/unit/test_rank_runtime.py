"""Unit: the rank-side pieces (output capture, tqdm forwarding, the non-blocking reporter)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time

from jupyter_torchdist.channel import protocol as P
from jupyter_torchdist.rank import api as rank_api
from jupyter_torchdist.core.errors import RankFailure, RunFailed
from jupyter_torchdist.rank.client import RankClient


def test_fd_capture_catches_print_c_level_and_subprocess_output():
    code = textwrap.dedent("""
        import os, subprocess, sys, json
        from jupyter_torchdist.rank.output import FdCapture
        lines = []
        cap = FdCapture(lambda s, t, at: lines.append([s, t]))
        print("from print")
        os.write(1, b"raw fd write\\n")
        subprocess.run(["sh", "-c", "echo from child; echo oops >&2"])
        sys.stderr.write("progress 1\\rprogress 2\\n")
        print("no newline at end", end="")
        cap.close()
        print(json.dumps(lines))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    import json
    lines = json.loads(out.stdout.strip().splitlines()[-1])
    assert ["stdout", "from print"] in lines
    assert ["stdout", "raw fd write"] in lines
    assert ["stdout", "from child"] in lines and ["stderr", "oops"] in lines
    assert ["stderr", "progress 1"] in lines and ["stderr", "progress 2"] in lines
    assert ["stdout", "no newline at end"] in lines


def test_tqdm_bars_report_progress_instead_of_drawing(monkeypatch):
    got = []
    code = textwrap.dedent("""
        import json, sys
        from jupyter_torchdist.rank.tqdm_bridge import install
        got = []
        install(lambda **kw: got.append(kw))
        from tqdm import tqdm
        from tqdm.auto import trange
        bar = tqdm(range(5), desc="train", mininterval=0)
        for i in bar:
            bar.set_postfix(loss=1.0 / (i + 1))
        for _ in trange(3, mininterval=0):
            pass
        assert "tqdm.notebook" not in sys.modules  # the costly front end is patched only if imported
        from tqdm.notebook import tqdm as nb_tqdm
        for _ in nb_tqdm(range(2), mininterval=0):
            pass
        print(json.dumps(got))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    got = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    assert out.stderr.strip() == "", "a forwarded bar must not draw"
    assert {"step": 5, "total": 5} .items() <= got[-2].items() or any(g["step"] == 5 and g["total"] == 5 for g in got)
    assert any(g.get("bar") == "train" and isinstance(g.get("loss"), float) for g in got)
    assert any(g["step"] == 3 and g["total"] == 3 for g in got)
    assert got[-1]["step"] == 2 and got[-1]["total"] == 2  # tqdm.notebook forwarded too


def test_report_is_a_noop_outside_a_run():
    assert rank_api._sink.post is None
    rank_api.report(step=1, loss=0.5)  # must not raise
    assert rank_api.rank() == 0 and rank_api.world_size() == 1 and rank_api.is_main()


def test_reporter_never_blocks_when_the_kernel_stalls():
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    client = RankClient(a)
    done = threading.Event()

    def flood():
        for i in range(50_000):
            client.post_progress({"t": "progress", "step": i, "metrics": {"pad": "x" * 50}})
        done.set()

    t = threading.Thread(target=flood)
    t.start()
    assert done.wait(30), "post_progress blocked while nobody read the socket"
    assert client.dropped_progress > 0  # dropped, oldest first, rather than blocking
    # the newest progress survives: read everything and finish
    received = []
    reader = threading.Thread(target=lambda: _drain(b, received))
    reader.start()
    assert client.send_final([{"t": "result", "value": None}], timeout=30)
    a.close()
    reader.join(10)
    flat = [m for frame in received for m in (frame if isinstance(frame, list) else [frame])]
    assert flat[-1]["t"] == "result", "the final message is never dropped"
    steps = [m["step"] for m in flat if m.get("t") == "progress"]
    assert steps[-1] == 49_999 and len(steps) < 50_000
    assert any(m["t"] == "dropped" and m["progress"] > 0 for m in flat)


def _drain(sock, out):
    try:
        while True:
            out.append(P.recv_frame(sock, 1 << 30))
    except (EOFError, OSError):
        pass


def test_metric_tensors_are_read_off_the_training_thread():
    import torch

    a, b = socket.socketpair()
    client = RankClient(a)
    client.post_progress({"t": "progress", "step": 1, "metrics": {"loss": torch.tensor(0.25), "obj": object()}})
    client.close()
    a.close()
    frames = []
    _drain(b, frames)
    msg = [m for f in frames for m in f if m["t"] == "progress"][0]
    assert msg["metrics"]["loss"] == 0.25 and isinstance(msg["metrics"]["obj"], str)


def test_run_failed_renders_root_first_and_others_collapsed():
    failures = {0: RankFailure(0, "h0", "exception", "RuntimeError: Connection closed by peer", "tb0", 2.0, True),
                2: RankFailure(2, "h2", "exception", "ValueError: real", "Traceback ...\nValueError: real", 3.0)}
    err = RunFailed("rank 2 on h2 failed first: ValueError: real", failures, 3)
    lines = err._render_traceback_()
    text = "\n".join(lines)
    assert "rank 2 on h2 failed first: ValueError: real" in lines[0]
    assert text.index("ValueError: real") < text.index("Other ranks")
    assert "rank 0 on h0: RuntimeError: Connection closed by peer" in text
    assert "tb0" not in text  # secondary tracebacks are collapsed to one line


def test_a_burst_of_reports_is_coalesced_into_few_small_frames():
    """Thousands of report() calls a second must not cost the training thread a core: the sender sends
    at most ~20 batches a second, each with at most PROGRESS_PER_BATCH progress points (the latest kept)."""
    from jupyter_torchdist.rank.client import BATCH_INTERVAL_S, PROGRESS_PER_BATCH

    a, b = socket.socketpair()
    client = RankClient(a)
    received: list = []
    reader = threading.Thread(target=lambda: _drain(b, received))
    reader.start()
    client.post({"t": "state", "state": "running"})
    t0 = time.monotonic()
    for i in range(20_000):
        client.post_progress({"t": "progress", "step": i, "metrics": {}})
    burst_s = time.monotonic() - t0
    client.send_final([{"t": "result", "value": None}], timeout=30)
    a.close()
    reader.join(10)
    batches = [f for f in received if isinstance(f, list)]
    progress = [[m for m in f if m["t"] == "progress"] for f in batches]
    assert all(len(p) <= PROGRESS_PER_BATCH for p in progress)
    assert len(batches) <= 3 + burst_s / BATCH_INTERVAL_S  # rate-limited, not one frame per report
    flat = [m for f in batches for m in f]
    assert [m["t"] for m in flat].count("state") == 1  # other messages are never thinned away
    assert [m["step"] for m in flat if m["t"] == "progress"][-1] == 19_999


def test_report_detaches_tensors_so_no_autograd_graph_is_kept_alive():
    import torch

    seen = []
    rank_api._sink.post = seen.append
    try:
        w = torch.ones(3, requires_grad=True)
        loss = (w * 2).sum()
        rank_api.report(step=1, loss=loss, lr=0.1)
    finally:
        rank_api._sink.post = None
    metrics = seen[0]["metrics"]
    assert metrics["loss"].grad_fn is None and not metrics["loss"].requires_grad
    assert metrics["loss"].item() == 6.0 and metrics["lr"] == 0.1


def test_log_lines_past_the_budget_are_counted_and_the_kernel_told(monkeypatch):
    from jupyter_torchdist.rank import client as client_mod

    monkeypatch.setattr(client_mod, "LOG_BUDGET_BYTES", 1000)
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    client = RankClient(a)
    received: list = []
    with client._cond:  # hold the sender back, as a busy kernel would: the queue fills up
        for i in range(100):
            client.post_log("stdout", f"line {i:03d} " + "x" * 90, float(i))
    reader = threading.Thread(target=lambda: _drain(b, received))
    reader.start()
    assert client.send_final([{"t": "result", "value": None}], timeout=30)
    a.close()
    reader.join(10)
    flat = [m for f in received for m in f]
    logs = [m for m in flat if m["t"] == "log"]
    [dropped] = [m for m in flat if m["t"] == "dropped"]
    assert len(logs) == 10 and logs[0]["text"].startswith("line 000")
    assert dropped["log_lines"] == 90 and dropped["log_bytes"] == 90 * 99
    assert flat[-1]["t"] == "result", "the outcome comes after the logs and the notice"


def test_send_final_waits_for_what_was_queued_before_it():
    """A kept rank's cell ends with send_final: the kernel must have the cell's logs before its outcome."""
    a, b = socket.socketpair()
    client = RankClient(a)
    for i in range(500):
        client.post_log("stdout", f"l{i}", float(i))
    assert client.send_final([{"t": "result", "value": None}], timeout=30)
    a.shutdown(socket.SHUT_WR)
    frames: list = []
    _drain(b, frames)
    flat = [m for f in frames for m in f]
    assert [m["text"] for m in flat if m["t"] == "log"] == [f"l{i}" for i in range(500)]
    assert flat[-1]["t"] == "result"
    client.close()
    a.close()


def test_a_short_cells_messages_reach_the_kernel_in_one_frame():
    """The first message after a quiet spell waits the sender's interval too: a short cell's state and its outcome go
    in send_final's one frame, one wake-up of the kernel instead of two on the cores the cell's collectives need."""
    a, b = socket.socketpair()
    client = RankClient(a, world_size=400)  # an interval of a second: no scheduler hiccup passes it
    time.sleep(0.05)
    client.post({"t": "state", "state": "running"})
    time.sleep(0.1)
    assert client.send_final([{"t": "result", "value": None}], timeout=30)
    a.shutdown(socket.SHUT_WR)
    frames: list = []
    _drain(b, frames)
    assert [[m["t"] for m in f] for f in frames] == [["state", "result"]]
    client.close()
    a.close()


def test_the_warm_up_step_leaves_the_random_state_and_forked_ranks_train(monkeypatch):
    """Ranks forked after ``preload``'s throwaway training step draw the random numbers they would have drawn, and
    their autograd works (no engine threads were started before the fork)."""
    import torch

    from jupyter_torchdist.rank import agent

    monkeypatch.setattr(agent, "_warmed", False)
    torch.manual_seed(1234)
    torch.rand(3)
    before, seed = torch.random.get_rng_state(), torch.initial_seed()
    agent._warm_first_step()
    assert agent._warmed
    assert torch.equal(before, torch.random.get_rng_state()) and torch.initial_seed() == seed
    pid = os.fork()
    if pid == 0:
        model = torch.nn.Linear(3, 1)
        model(torch.ones(2, 3)).sum().backward()
        os._exit(0 if model.weight.grad is not None else 1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
